//! Sinks: work committed, output taken back, rows sent to dead letters.

use metrics::counter;
use tracing::{debug, warn};

use super::{InternalEvent, task_labels};

/// A sink committed one writer's work of a checkpoint.
#[derive(Debug)]
pub struct SinkCommitted<'a> {
    /// The job.
    pub job: &'a str,
    /// The sink.
    pub uid: &'a str,
    /// The writer.
    pub subtask: usize,
    /// The checkpoint.
    pub checkpoint: u64,
}

impl InternalEvent for SinkCommitted<'_> {
    fn emit(self) {
        debug!(
            job = self.job,
            sink = self.uid,
            subtask = self.subtask,
            checkpoint = self.checkpoint,
            "sink committed"
        );
        counter!(
            "tidewater_sink_commits_total",
            &task_labels(self.job, self.uid, self.subtask)
        )
        .increment(1);
    }
}

/// A sink took back what a checkpoint that cannot be restored committed.
#[derive(Debug)]
pub struct SinkReverted<'a> {
    /// The job.
    pub job: &'a str,
    /// The sink.
    pub uid: &'a str,
    /// The writer.
    pub subtask: usize,
    /// The checkpoint whose output is taken back.
    pub checkpoint: u64,
}

impl InternalEvent for SinkReverted<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            sink = self.uid,
            subtask = self.subtask,
            checkpoint = self.checkpoint,
            "taking back output of a checkpoint that cannot be restored"
        );
        counter!(
            "tidewater_sink_reverts_total",
            &task_labels(self.job, self.uid, self.subtask)
        )
        .increment(1);
    }
}

/// A row a sink could not take, or an expression failed on, went to the
/// dead-letter output.
#[derive(Debug)]
pub struct RowDeadLettered<'a> {
    /// The job.
    pub job: &'a str,
    /// The sink, or the transform.
    pub uid: &'a str,
    /// The writer.
    pub subtask: usize,
    /// Where dead letters go (a table, a folder).
    pub target: &'a str,
    /// The row, as text.
    pub row: &'a str,
    /// Why it was refused.
    pub reason: &'a str,
}

impl InternalEvent for RowDeadLettered<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            sink = self.uid,
            subtask = self.subtask,
            row = self.row,
            error = self.reason,
            "row sent to {}",
            self.target
        );
        counter!(
            "tidewater_rows_dead_lettered_total",
            &task_labels(self.job, self.uid, self.subtask)
        )
        .increment(1);
        super::live::dead_lettered();
    }
}

/// Staged work that no checkpoint will commit could not be discarded (a
/// later restore discards it).
#[derive(Debug)]
pub struct CleanupFailed<'a> {
    /// The job.
    pub job: &'a str,
    /// The sink.
    pub uid: &'a str,
    /// Why.
    pub error: &'a crate::Error,
}

impl InternalEvent for CleanupFailed<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            sink = self.uid,
            error = %self.error,
            "could not discard staged work no checkpoint will commit; the next restore discards it"
        );
    }
}
