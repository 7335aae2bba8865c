//! Restores: from a checkpoint, from scratch, past an unusable checkpoint.

use metrics::counter;
use tracing::{info, warn};

use super::InternalEvent;

/// The run continues from a checkpoint.
#[derive(Debug)]
pub struct CheckpointRestored<'a> {
    /// The job.
    pub job: &'a str,
    /// The checkpoint.
    pub checkpoint: u64,
    /// Rows the sources had read at it.
    pub rows_read: u64,
}

impl InternalEvent for CheckpointRestored<'_> {
    fn emit(self) {
        info!(
            job = self.job,
            checkpoint = self.checkpoint,
            rows_read = self.rows_read,
            "restoring"
        );
        counter!("tidewater_restores_total", "job" => self.job.to_string(), "from" => "checkpoint")
            .increment(1);
    }
}

/// The run starts from the beginning (no checkpoint, or none usable).
#[derive(Debug)]
pub struct StartedFresh<'a> {
    /// The job.
    pub job: &'a str,
    /// Whether checkpoints existed but none could be restored.
    pub after_fallbacks: bool,
}

impl InternalEvent for StartedFresh<'_> {
    fn emit(self) {
        if self.after_fallbacks {
            warn!(
                job = self.job,
                "no usable checkpoint: starting from the beginning"
            );
        }
        counter!("tidewater_restores_total", "job" => self.job.to_string(), "from" => "start")
            .increment(1);
    }
}

/// A checkpoint could not be restored; the one before it is tried.
#[derive(Debug)]
pub struct CheckpointFallback<'a> {
    /// The job.
    pub job: &'a str,
    /// The unusable checkpoint.
    pub checkpoint: u64,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for CheckpointFallback<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            checkpoint = self.checkpoint,
            error = self.error,
            "checkpoint is unusable; falling back to the one before it"
        );
        counter!("tidewater_checkpoint_fallbacks_total", "job" => self.job.to_string())
            .increment(1);
    }
}

/// A pipeline change the restore accepted (an operator added or removed).
#[derive(Debug)]
pub struct RestoreChange<'a> {
    /// The job.
    pub job: &'a str,
    /// What changed.
    pub note: &'a str,
}

impl InternalEvent for RestoreChange<'_> {
    fn emit(self) {
        info!(job = self.job, "{}", self.note);
    }
}

/// A source has no cursors in the restored checkpoint and reads from the start.
#[derive(Debug)]
pub struct SourceStartsOver<'a> {
    /// The job.
    pub job: &'a str,
    /// The source.
    pub uid: &'a str,
}

impl InternalEvent for SourceStartsOver<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            source = self.uid,
            "source has no cursors in the checkpoint: reading from the start"
        );
    }
}

/// An operator's or a sink's state, taken at one parallelism, was handed
/// to the subtasks of another.
#[derive(Debug)]
pub struct StateRescaled<'a> {
    /// The job.
    pub job: &'a str,
    /// The operator or sink.
    pub uid: &'a str,
    /// The parallelism the state was taken at.
    pub from: usize,
    /// The parallelism it was handed to.
    pub to: usize,
    /// The job's key groups.
    pub key_groups: u32,
}

impl InternalEvent for StateRescaled<'_> {
    fn emit(self) {
        info!(
            job = self.job,
            uid = self.uid,
            from = self.from,
            to = self.to,
            key_groups = self.key_groups,
            "state split among the subtasks of a new parallelism"
        );
        counter!("tidewater_state_rescales_total", "job" => self.job.to_string()).increment(1);
    }
}

/// The job resumes with the key group count of its checkpoints, not the
/// one configured: the count is fixed when a job first starts.
#[derive(Debug)]
pub struct KeyGroupsKept<'a> {
    /// The job.
    pub job: &'a str,
    /// The count in the checkpoint.
    pub kept: u32,
    /// The count configured.
    pub configured: u32,
}

impl InternalEvent for KeyGroupsKept<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            kept = self.kept,
            configured = self.configured,
            "the job keeps the key group count of its checkpoints (fixed when it first started); \
             the configured count applies to a new job only"
        );
    }
}
