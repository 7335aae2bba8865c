//! What the API answers: the job store's records as the JSON of
//! `/api/v1`, each conversion a pure function of the record.

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;
use tidewater_jobs::{CheckpointRecord, JobRecord, JobState};
use utoipa::ToSchema;

/// An RFC 3339 time (UTC, ms) of `ms` since the Unix epoch.
pub fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

/// One job.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct JobView {
    /// Its id in the job store.
    pub id: i64,
    /// The job's name.
    pub name: String,
    /// Where it is in its life.
    #[schema(value_type = String, example = "RUNNING")]
    pub state: String,
    /// Rows read (including those before a restore) and the sources' estimate.
    pub progress: ProgressView,
    /// This run's recent rate (null when not running or not known yet).
    pub rows_per_second: Option<f64>,
    /// Seconds to go at that rate, when known.
    pub eta_seconds: Option<f64>,
    /// The last completed checkpoint.
    pub last_checkpoint: Option<LastCheckpointView>,
    /// What a crash now would redo.
    pub exposure: ExposureView,
    /// What holds the sources back (`rate limit 50000 rows/s`), if anything.
    pub throttle: Option<String>,
    /// The worker's lease, while one holds the job.
    pub lease: Option<LeaseView>,
    /// The epoch of the last lease taken: the fencing token of its commits.
    pub epoch: u64,
    /// Why it failed.
    pub error: Option<ErrorView>,
    /// Where its checkpoints are.
    pub state_url: String,
    /// When it was submitted.
    pub created_at: String,
    /// When its record last changed.
    pub updated_at: String,
}

/// Rows done and the total.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ProgressView {
    /// Rows read.
    pub done: u64,
    /// The sources' estimate of all rows (null when unknown).
    pub total: Option<u64>,
}

/// The last completed checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct LastCheckpointView {
    /// Its id.
    pub id: u64,
    /// When it completed.
    pub at: Option<String>,
    /// Bytes of state it wrote (null when its worker did not record it).
    pub bytes: Option<u64>,
    /// From trigger to manifest.
    pub duration_ms: Option<u64>,
}

/// Rows and seconds since the last completed checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ExposureView {
    /// Rows read since.
    pub rows: u64,
    /// Seconds since (or since the run started).
    pub seconds: f64,
}

/// Who holds a job.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct LeaseView {
    /// `pid 4242 on worker-3`.
    pub owner: String,
    /// The lease's epoch.
    pub epoch: u64,
    /// When it runs out unless renewed.
    pub expires_at: String,
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorView {
    /// A short stable name: `bad_input`, `fenced`, `lease_lost`, ...
    pub code: String,
    /// The whole message.
    pub message: String,
    /// Whether running it again may succeed without a change.
    pub retryable: bool,
}

/// One completed checkpoint and where its time went.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CheckpointView {
    /// Its id.
    pub id: u64,
    /// `periodic`, `savepoint` or `final`.
    pub kind: String,
    /// The epoch of the run that took it.
    pub epoch: u64,
    /// When it was triggered.
    pub triggered_at: String,
    /// From trigger to manifest written (when the checkpoint existed).
    pub duration_ms: u64,
    /// Bytes of state written.
    pub bytes: u64,
    /// Until the last task had its barrier.
    pub align_ms: u64,
    /// The slowest task's snapshot (operator state, sink pre-commit).
    pub snapshot_ms: u64,
    /// The slowest task's encoding and upload of its state.
    pub upload_ms: u64,
    /// Writing the manifest.
    pub manifest_ms: u64,
    /// Committing the sinks' work, after the manifest.
    pub commit_ms: u64,
}

/// A job's checkpoints, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct CheckpointsView {
    /// The job.
    pub job: i64,
    /// Its last checkpoints (up to `limit`), oldest first.
    pub checkpoints: Vec<CheckpointView>,
}

/// The jobs of the store.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct JobsView {
    /// Newest first.
    pub jobs: Vec<JobView>,
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ApiError {
    /// A short stable name: `not_found`, `invalid_spec`, `unauthorized`, ...
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
    /// For an invalid spec: each problem at its line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<SpecProblem>,
}

/// One problem in a submitted spec.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SpecProblem {
    /// 1-based line (0: the spec as a whole).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl JobView {
    /// The view of `job`; `last` is its newest recorded checkpoint.
    pub fn of(job: &JobRecord, last: Option<&CheckpointRecord>) -> JobView {
        let p = &job.progress;
        let running = job.state.has_worker();
        let last_checkpoint = p.last_checkpoint.map(|id| {
            let recorded = last.filter(|c| c.id == id);
            LastCheckpointView {
                id,
                at: p.last_checkpoint_ms.map(rfc3339),
                bytes: recorded.map(|c| c.bytes),
                duration_ms: recorded.map(|c| c.duration_ms),
            }
        });
        JobView {
            id: job.id,
            name: job.name.clone(),
            state: job.state.as_str().to_string(),
            progress: ProgressView {
                done: p.rows_done,
                total: p.rows_total,
            },
            rows_per_second: p.rows_per_second.filter(|_| running),
            eta_seconds: p.eta_seconds.filter(|_| running),
            last_checkpoint,
            exposure: ExposureView {
                rows: p.exposure_rows,
                seconds: p.exposure_ms as f64 / 1000.0,
            },
            throttle: p.throttle.clone(),
            lease: job.lease.as_ref().map(|l| LeaseView {
                owner: l.owner.to_string(),
                epoch: job.epoch,
                expires_at: rfc3339(l.expires_ms),
            }),
            epoch: job.epoch,
            error: job.error.as_ref().map(|e| ErrorView {
                code: e.code.clone(),
                message: e.message.clone(),
                retryable: e.retryable,
            }),
            state_url: job.state_url.clone(),
            created_at: rfc3339(job.created_ms),
            updated_at: rfc3339(job.updated_ms),
        }
    }

    /// Whether the job may still change by itself: a client should poll again.
    pub fn in_progress(&self) -> bool {
        self.state
            .parse::<JobState>()
            .is_ok_and(|state| !state.has_ended())
    }
}

impl CheckpointView {
    /// The view of a recorded checkpoint.
    pub fn of(c: &CheckpointRecord) -> CheckpointView {
        CheckpointView {
            id: c.id,
            kind: c.kind.clone(),
            epoch: c.epoch,
            triggered_at: rfc3339(c.triggered_ms),
            duration_ms: c.duration_ms,
            bytes: c.bytes,
            align_ms: c.align_ms,
            snapshot_ms: c.snapshot_ms,
            upload_ms: c.upload_ms,
            manifest_ms: c.manifest_ms,
            commit_ms: c.commit_ms,
        }
    }
}

impl ApiError {
    /// An error without spec problems.
    pub fn new(code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code: code.to_string(),
            message: message.into(),
            problems: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidewater_jobs::lease::LeaseRecord;
    use tidewater_jobs::{Owner, Report};

    fn job(state: JobState) -> JobRecord {
        JobRecord {
            id: 7,
            name: "copy".into(),
            state_url: "/tmp/state".into(),
            state,
            spec: String::new(),
            spec_path: None,
            idempotency_key: None,
            progress: Report {
                rows_done: 500,
                rows_total: Some(1000),
                rows_per_second: Some(250.0),
                eta_seconds: Some(2.0),
                last_checkpoint: Some(3),
                last_checkpoint_ms: Some(1_000),
                exposure_rows: 40,
                exposure_ms: 1_500,
                throttle: None,
            },
            error: None,
            lease: Some(LeaseRecord {
                owner: Owner {
                    host: "w1".into(),
                    pid: 42,
                },
                acquired_ms: 0,
                expires_ms: 30_000,
            }),
            epoch: 5,
            discard: false,
            created_ms: 0,
            updated_ms: 2_000,
        }
    }

    fn checkpoint(id: u64) -> CheckpointRecord {
        CheckpointRecord {
            id,
            epoch: 5,
            kind: "periodic".into(),
            triggered_ms: 900,
            duration_ms: 12,
            bytes: 4096,
            align_ms: 1,
            snapshot_ms: 2,
            upload_ms: 3,
            manifest_ms: 4,
            commit_ms: 5,
        }
    }

    #[test]
    fn a_running_job_shows_its_rate_lease_and_last_checkpoint() {
        let view = JobView::of(&job(JobState::Running), Some(&checkpoint(3)));
        assert_eq!(view.rows_per_second, Some(250.0));
        assert_eq!(view.eta_seconds, Some(2.0));
        assert_eq!(
            view.last_checkpoint,
            Some(LastCheckpointView {
                id: 3,
                at: Some("1970-01-01T00:00:01.000Z".into()),
                bytes: Some(4096),
                duration_ms: Some(12),
            })
        );
        let lease = view.lease.as_ref().expect("a lease");
        assert_eq!(lease.owner, "pid 42 on w1");
        assert_eq!(lease.expires_at, "1970-01-01T00:00:30.000Z");
        assert_eq!(view.exposure.seconds, 1.5);
        assert!(view.in_progress());
    }

    #[test]
    fn an_ended_job_has_no_rate_and_a_stale_recorded_checkpoint_is_not_shown() {
        let mut ended = job(JobState::Succeeded);
        ended.lease = None;
        let view = JobView::of(&ended, Some(&checkpoint(2)));
        assert_eq!(view.rows_per_second, None);
        assert_eq!(view.eta_seconds, None);
        let last = view.last_checkpoint.clone().expect("a checkpoint");
        assert_eq!((last.id, last.bytes, last.duration_ms), (3, None, None));
        assert!(view.lease.is_none());
        assert!(!view.in_progress());
    }

    #[test]
    fn a_checkpoint_keeps_its_phases() {
        let view = CheckpointView::of(&checkpoint(9));
        assert_eq!(
            (
                view.align_ms,
                view.snapshot_ms,
                view.upload_ms,
                view.manifest_ms,
                view.commit_ms
            ),
            (1, 2, 3, 4, 5)
        );
        assert_eq!(view.triggered_at, "1970-01-01T00:00:00.900Z");
    }
}
