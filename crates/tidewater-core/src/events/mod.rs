//! Everything tidewater tells an operator, as typed events (after Vector's
//! `internal_events`): each struct is one thing that happened, and its
//! [`InternalEvent::emit`] is the one place that writes its log line (through
//! `tracing`, fields before the message) and updates its metrics (through
//! the [`metrics`] facade, so that an exporter such as Prometheus plugs in
//! without touching the core). The list of files below is the list of what
//! the system can report.
//!
//! Metric names start with `tidewater_`; labels are `job`, and where one
//! applies `uid` (the operator) and `subtask`.

mod checkpoint;
mod connection;
mod job;
pub mod live;
mod operator;
mod restore;
mod sink;
mod storage;
mod throttle;

pub use checkpoint::{
    CheckpointCompleted, CheckpointDeclined, CheckpointDelayed, CheckpointStarted, RetentionFailed,
    SavepointRequested,
};
pub use connection::ConnectionRetried;
pub use job::{JobCompleted, JobFenced, JobRestarting, JobStarting};
pub use operator::{OperatorMeter, PreAggregationPassesRowsOn};
pub use restore::{
    CheckpointFallback, CheckpointRestored, KeyGroupsKept, RestoreChange, SourceStartsOver,
    StartedFresh, StateRescaled,
};
pub use sink::{CleanupFailed, RowDeadLettered, SinkCommitted, SinkReverted};
pub use storage::{
    CarriedFileAlreadyPublished, DirectWriteRefused, FileAlreadyPublished, FileCommitted,
    FileFinished, FileResumed, InputDeadLettered, KeyOutOfStorageOrder, LeftoverDeleted,
    PreparedCommitted, PreparedRolledBack, RecordDeadLettered, SourcePlanned,
    StoreWithoutConditionalWrites,
};
pub use throttle::{ReplicaLagRead, ThrottleCheckFailed, ThrottlePaused, ThrottleResumed};

/// One thing that happened, reported once, in one place.
pub trait InternalEvent {
    /// Writes the log line and updates the metrics.
    fn emit(self);
}

/// The labels of an operator's subtask.
fn task_labels(job: &str, uid: &str, subtask: usize) -> [(&'static str, String); 3] {
    [
        ("job", job.to_string()),
        ("uid", uid.to_string()),
        ("subtask", subtask.to_string()),
    ]
}
