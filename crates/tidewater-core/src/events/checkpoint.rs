//! Checkpoints: started, completed, declined, old ones not deleted, a savepoint asked for.

use std::time::Duration;

use metrics::{counter, histogram};
use tracing::{debug, info, warn};

use super::InternalEvent;
use crate::checkpoint::CheckpointKind;

/// The coordinator injected the barriers of a checkpoint.
#[derive(Debug)]
pub struct CheckpointStarted<'a> {
    /// The job.
    pub job: &'a str,
    /// The checkpoint.
    pub checkpoint: u64,
    /// Why it was taken.
    pub kind: CheckpointKind,
}

impl InternalEvent for CheckpointStarted<'_> {
    fn emit(self) {
        debug!(job = self.job, checkpoint = self.checkpoint, kind = ?self.kind, "checkpoint started");
        counter!("tidewater_checkpoints_started_total", "job" => self.job.to_string()).increment(1);
    }
}

/// A checkpoint's manifest exists and its sink work is committed.
#[derive(Debug)]
pub struct CheckpointCompleted<'a> {
    /// The job.
    pub job: &'a str,
    /// The checkpoint.
    pub checkpoint: u64,
    /// Why it was taken.
    pub kind: CheckpointKind,
    /// From the trigger to the manifest written (the checkpoint exists).
    pub duration: Duration,
    /// Where the time went, the commit after the manifest included.
    pub phases: crate::CheckpointPhases,
    /// Bytes of state written.
    pub state_bytes: u64,
    /// Commit handles committed.
    pub commits: usize,
    /// Rows the sources had read when it was taken.
    pub rows_read: u64,
}

impl InternalEvent for CheckpointCompleted<'_> {
    fn emit(self) {
        info!(
            job = self.job,
            checkpoint = self.checkpoint,
            kind = ?self.kind,
            took_ms = self.duration.as_millis() as u64,
            state_bytes = self.state_bytes,
            commits = self.commits,
            rows_read = self.rows_read,
            "checkpoint complete"
        );
        let kind = format!("{:?}", self.kind).to_lowercase();
        counter!("tidewater_checkpoints_completed_total", "job" => self.job.to_string(), "kind" => kind)
            .increment(1);
        histogram!("tidewater_checkpoint_duration_seconds", "job" => self.job.to_string())
            .record(self.duration.as_secs_f64());
        histogram!("tidewater_checkpoint_state_bytes", "job" => self.job.to_string())
            .record(self.state_bytes as f64);
        let p = self.phases;
        for (phase, took) in [
            ("align", p.align),
            ("snapshot", p.snapshot),
            ("upload", p.upload),
            ("manifest", p.manifest),
            ("commit", p.commit),
        ] {
            histogram!("tidewater_checkpoint_phase_seconds", "job" => self.job.to_string(), "phase" => phase)
                .record(took.as_secs_f64());
        }
    }
}

/// A periodic checkpoint started late: the one before it took longer than
/// the interval (usually a state store slower than the interval allows),
/// and at most one checkpoint is in flight.
#[derive(Debug)]
pub struct CheckpointDelayed<'a> {
    /// The job.
    pub job: &'a str,
    /// The checkpoint that started late.
    pub checkpoint: u64,
    /// How long after it was due it started.
    pub behind: Duration,
    /// The checkpoint interval.
    pub interval: Duration,
    /// How many delayed checkpoints to warn of now (this one included);
    /// `None` while the last warning is recent.
    pub warn_of: Option<u64>,
}

impl InternalEvent for CheckpointDelayed<'_> {
    fn emit(self) {
        if let Some(delays) = self.warn_of {
            warn!(
                job = self.job,
                checkpoint = self.checkpoint,
                behind_ms = self.behind.as_millis() as u64,
                interval_ms = self.interval.as_millis() as u64,
                delays,
                "checkpoints delayed: each took longer than the checkpoint interval, so the \
                 next waited (the state store is slow, or the state large); raise \
                 the checkpoint interval, or see where the time goes in the checkpoint phases"
            );
        } else {
            debug!(job = self.job, checkpoint = self.checkpoint, behind = ?self.behind, "checkpoint delayed");
        }
        counter!("tidewater_checkpoints_delayed_total", "job" => self.job.to_string()).increment(1);
        histogram!("tidewater_checkpoint_delay_seconds", "job" => self.job.to_string())
            .record(self.behind.as_secs_f64());
    }
}

/// A task could not take its part of a checkpoint (its state did not
/// encode or upload, its sink did not pre-commit): the checkpoint is
/// abandoned and the job fails (or restarts, when a retry may help).
#[derive(Debug)]
pub struct CheckpointDeclined<'a> {
    /// The job.
    pub job: &'a str,
    /// The checkpoint.
    pub checkpoint: u64,
    /// Why.
    pub error: &'a crate::Error,
}

impl InternalEvent for CheckpointDeclined<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            checkpoint = self.checkpoint,
            error = %self.error,
            "checkpoint declined"
        );
        counter!("tidewater_checkpoints_declined_total", "job" => self.job.to_string())
            .increment(1);
    }
}

/// Checkpoints past the retention count could not be deleted (retried at
/// the next checkpoint: they cost space, not correctness).
#[derive(Debug)]
pub struct RetentionFailed<'a> {
    /// The job.
    pub job: &'a str,
    /// Why.
    pub error: &'a crate::Error,
}

impl InternalEvent for RetentionFailed<'_> {
    fn emit(self) {
        warn!(job = self.job, error = %self.error, "could not delete old checkpoints");
        counter!("tidewater_retention_failures_total", "job" => self.job.to_string()).increment(1);
    }
}

/// A cancel asked for a savepoint.
#[derive(Debug)]
pub struct SavepointRequested<'a> {
    /// The job.
    pub job: &'a str,
}

impl InternalEvent for SavepointRequested<'_> {
    fn emit(self) {
        info!(job = self.job, "cancel requested: taking a savepoint");
        counter!("tidewater_savepoints_requested_total", "job" => self.job.to_string())
            .increment(1);
    }
}
