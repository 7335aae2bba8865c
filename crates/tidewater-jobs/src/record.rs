//! What the store keeps about a job.

use crate::lease::LeaseRecord;
use crate::state::JobState;

/// A job's id in its store.
pub type JobId = i64;

/// One job, as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    /// Its id in the store.
    pub id: JobId,
    /// The job's name (its identity in the state store, with `state_url`).
    pub name: String,
    /// Where its checkpoints are.
    pub state_url: String,
    /// Where it is in its life.
    pub state: JobState,
    /// The spec it runs, as submitted.
    pub spec: String,
    /// The file the spec was read from, if any.
    pub spec_path: Option<String>,
    /// The key it was submitted with, if any.
    pub idempotency_key: Option<String>,
    /// What its worker last reported.
    pub progress: Report,
    /// Why it failed.
    pub error: Option<JobError>,
    /// Its lease, while a worker holds one.
    pub lease: Option<LeaseRecord>,
    /// The epoch of the last lease taken: the fencing token.
    pub epoch: u64,
    /// A cancel asked that the savepoint be skipped (`cancel --discard`).
    pub discard: bool,
    /// When it was submitted (store clock, ms since the Unix epoch).
    pub created_ms: i64,
    /// When the record last changed (store clock).
    pub updated_ms: i64,
}

/// What a worker reports with each heartbeat.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// Rows read, including those before a restore.
    pub rows_done: u64,
    /// The sources' estimate of all rows, when known.
    pub rows_total: Option<u64>,
    /// This run's recent rate.
    pub rows_per_second: Option<f64>,
    /// Seconds to go at that rate, when known.
    pub eta_seconds: Option<f64>,
    /// The last completed checkpoint.
    pub last_checkpoint: Option<u64>,
    /// When it completed (the worker's clock, ms since the Unix epoch).
    pub last_checkpoint_ms: Option<i64>,
    /// Rows read since the last checkpoint: what a crash now would redo.
    pub exposure_rows: u64,
    /// Time since the last checkpoint (or the start), in ms.
    pub exposure_ms: u64,
    /// What holds the sources back, if anything (`rate limit 50000 rows/s`).
    pub throttle: Option<String>,
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobError {
    /// A short stable name: `bad_input`, `fenced`, `lease_lost`, ...
    pub code: String,
    /// The whole message.
    pub message: String,
    /// Whether running it again may succeed without a change.
    pub retryable: bool,
}

impl JobError {
    /// The record of `error`.
    pub fn of(error: &tidewater_core::Error) -> JobError {
        use tidewater_core::Error as E;
        let mut inner = error;
        while let E::InOperator { source, .. } = inner {
            inner = source;
        }
        let code = match inner {
            E::InvalidPipeline(_) => "invalid_pipeline",
            E::InvalidConfig(_) => "invalid_config",
            E::BadInput(_) => "bad_input",
            E::IncompatibleState { .. } | E::IncompatiblePartitioner { .. } => "incompatible_state",
            E::Corrupt(_) => "corrupt_checkpoint",
            E::Fenced { .. } => "fenced",
            E::LeaseLost { .. } => "lease_lost",
            E::Storage { .. } => "storage",
            E::Arrow(_) => "arrow",
            E::External { .. } => "external",
            E::Stopped(_) => "stopped",
            _ => "internal",
        };
        JobError {
            code: code.to_string(),
            message: error.to_string(),
            retryable: error.is_retryable(),
        }
    }
}

/// A job to submit.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The job's name.
    pub name: String,
    /// Where its checkpoints go.
    pub state_url: String,
    /// The spec's text.
    pub spec: String,
    /// The spec's file.
    pub spec_path: Option<String>,
    /// With a key, submitting again returns the job of the first submission.
    pub idempotency_key: Option<String>,
}

/// What submitting found or made.
#[derive(Debug, Clone, PartialEq)]
pub enum Submitted {
    /// A new job, QUEUED.
    Created(JobRecord),
    /// The job with this name and state location was already there.
    Existing(JobRecord),
    /// The idempotency key was used before: this is that job.
    SameKey(JobRecord),
}

impl Submitted {
    /// The job, whichever it is.
    pub fn job(&self) -> &JobRecord {
        match self {
            Submitted::Created(j) | Submitted::Existing(j) | Submitted::SameKey(j) => j,
        }
    }
}

/// How a run ended, as the store records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Its final checkpoint exists.
    Succeeded,
    /// Stopped on an error.
    Failed(JobError),
    /// Stopped on a cancel.
    Cancelled,
}

/// What a heartbeat learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease was renewed; `Some` when a cancel was asked (`true`: discard).
    Renewed {
        /// A cancel is asked, and whether to discard.
        cancel: Option<bool>,
    },
    /// The lease is not this worker's any more.
    Lost(String),
}

/// What a run reported at one instant: one point of the dashboard's
/// charts over time.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// The epoch of the run that reported it.
    pub epoch: u64,
    /// When (the worker's clock, ms since the Unix epoch).
    pub at_ms: i64,
    /// Rows read, including those before a restore.
    pub rows_done: u64,
    /// This run's recent rate.
    pub rows_per_second: Option<f64>,
    /// Rows read since the last completed checkpoint.
    pub exposure_rows: u64,
    /// Time since the last completed checkpoint (or the start), in ms.
    pub exposure_ms: u64,
    /// What held the sources back, if anything.
    pub throttle: Option<String>,
    /// The replica's lag, where a source throttles on it.
    pub replica_lag_ms: Option<u64>,
    /// Rows this run set aside as dead letters.
    pub rows_dead_lettered: u64,
    /// The checkpoint this run restored (None: it started fresh).
    pub restored_from: Option<u64>,
    /// Checkpoints the restore passed over as unreadable.
    pub fallbacks: u64,
}

impl Sample {
    /// Whether a run `elapsed` into its life, whose last sample was
    /// `since_last` ago (None: none yet), records one now. A run samples
    /// every heartbeat in its first minutes, then more sparsely, so that a
    /// run of any length keeps about [`Sample::PER_RUN`] points.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tidewater_jobs::Sample;
    /// let s = Duration::from_secs;
    /// assert!(Sample::due(s(0), None));
    /// assert!(Sample::due(s(60), Some(s(2))));
    /// // Six hours in, one point every 21.6 s.
    /// assert!(!Sample::due(s(6 * 3600), Some(s(10))));
    /// ```
    pub fn due(elapsed: std::time::Duration, since_last: Option<std::time::Duration>) -> bool {
        let Some(since_last) = since_last else {
            return true;
        };
        let spacing = elapsed.as_secs_f64() / Self::PER_RUN as f64;
        since_last.as_secs_f64() >= spacing
    }

    /// About how many samples a run keeps, however long it runs.
    pub const PER_RUN: u32 = 1000;
}

/// One completed checkpoint of a job, as its worker reported it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointRecord {
    /// The checkpoint's id.
    pub id: u64,
    /// The epoch of the run that took it.
    pub epoch: u64,
    /// `periodic`, `savepoint` or `final`.
    pub kind: String,
    /// When it was triggered (the worker's clock, ms since the Unix epoch).
    pub triggered_ms: i64,
    /// From the trigger to the manifest written: when it existed.
    pub duration_ms: u64,
    /// Bytes of state written.
    pub bytes: u64,
    /// Until the last task had its barrier.
    pub align_ms: u64,
    /// The slowest task's snapshot (state and sink pre-commit).
    pub snapshot_ms: u64,
    /// The slowest task's encoding and upload.
    pub upload_ms: u64,
    /// Writing the manifest.
    pub manifest_ms: u64,
    /// Committing the sinks, after the manifest.
    pub commit_ms: u64,
}

impl CheckpointRecord {
    /// The record of `stats`, taken by the run of `epoch`.
    pub fn of(stats: &tidewater_core::CheckpointStats, epoch: u64) -> CheckpointRecord {
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        CheckpointRecord {
            id: stats.id,
            epoch,
            kind: format!("{:?}", stats.kind).to_lowercase(),
            triggered_ms: stats.triggered_at_ms as i64,
            duration_ms: ms(stats.duration),
            bytes: stats.state_bytes,
            align_ms: ms(stats.phases.align),
            snapshot_ms: ms(stats.phases.snapshot),
            upload_ms: ms(stats.phases.upload),
            manifest_ms: ms(stats.phases.manifest),
            commit_ms: ms(stats.phases.commit),
        }
    }
}
