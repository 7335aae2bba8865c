//! A running job's handle, and how a run ended.

use std::sync::Arc;

use tokio::sync::watch;

use super::progress::{CheckpointStats, Progress, ProgressSnapshot};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, Epoch};

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// All input was processed and the final checkpoint committed.
    Completed(Summary),
    /// The state shows the job completed in an earlier run; nothing was done.
    AlreadyComplete {
        /// The final checkpoint.
        checkpoint: CheckpointId,
    },
    /// Cancelled at a savepoint; running the job again resumes from it.
    Cancelled {
        /// The savepoint.
        savepoint: CheckpointId,
        /// What this run did.
        summary: Summary,
    },
    /// Stopped at once without a savepoint ([`JobControl::discard`]): the
    /// work since the last completed checkpoint was thrown away, and
    /// running the job again resumes from that checkpoint.
    Discarded {
        /// The checkpoint a rerun resumes from (`None`: from the start).
        resumes_from: Option<CheckpointId>,
        /// What this run did.
        summary: Summary,
    },
}

/// How a job is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Not asked.
    No,
    /// Take a savepoint, then stop.
    AtSavepoint,
    /// Stop now and throw away what no completed checkpoint holds.
    Discarding,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The checkpoint this run resumed from.
    pub restored_from: Option<CheckpointId>,
    /// The last checkpoint of this run.
    pub last_checkpoint: CheckpointId,
    /// The worker's epoch.
    pub epoch: Epoch,
    /// Rows the sources had read at the restored checkpoint (0 without one).
    pub rows_restored: u64,
    /// Counters at the end.
    pub progress: ProgressSnapshot,
    /// Every checkpoint of this run, oldest first (the last 4096).
    pub checkpoints: Vec<CheckpointStats>,
    /// Checkpoints the restore passed over as unusable (newest first), with
    /// why; their committed output was taken back.
    pub fallbacks: Vec<(CheckpointId, String)>,
}

/// A running job.
pub struct JobHandle {
    pub(crate) control: JobControl,
    pub(crate) join: tokio::task::JoinHandle<Result<Outcome>>,
}

/// Watches and cancels a running job; cheap to clone and keep while
/// [`JobHandle::join`] is awaited.
#[derive(Debug, Clone)]
pub struct JobControl {
    pub(crate) progress: Arc<Progress>,
    pub(crate) cancel: Arc<watch::Sender<Stop>>,
}

impl JobControl {
    /// Live counters.
    pub fn progress(&self) -> ProgressSnapshot {
        self.progress.snapshot()
    }

    /// The checkpoints this run completed with an id past `id`, oldest
    /// first (of the last 4096).
    pub fn checkpoints_after(&self, id: u64) -> Vec<CheckpointStats> {
        self.progress.checkpoints_after(id)
    }

    /// Asks the job to take a savepoint and stop. Returns at once;
    /// [`JobHandle::join`] returns [`Outcome::Cancelled`] once the savepoint is complete.
    pub fn cancel(&self) {
        // A discard already asked for is not softened into a savepoint.
        self.cancel.send_if_modified(|stop| {
            let asked = *stop == Stop::No;
            if asked {
                *stop = Stop::AtSavepoint;
            }
            asked
        });
    }

    /// Asks the job to stop at once, taking no savepoint: tasks stop, the
    /// sinks' pre-committed work that no completed checkpoint refers to is
    /// aborted (PostgreSQL's prepared transactions rolled back), and
    /// [`JobHandle::join`] returns [`Outcome::Discarded`]. Running the job
    /// again resumes from its last completed checkpoint. Also ends a
    /// savepoint already under way.
    pub fn discard(&self) {
        let _ = self.cancel.send(Stop::Discarding);
    }
}

impl JobHandle {
    /// A control for watching and cancelling the job.
    pub fn control(&self) -> JobControl {
        self.control.clone()
    }

    /// Live counters.
    pub fn progress(&self) -> ProgressSnapshot {
        self.control.progress()
    }

    /// Asks the job to take a savepoint and stop (see [`JobControl::cancel`]).
    pub fn cancel(&self) {
        self.control.cancel()
    }

    /// Waits for the job to end.
    pub async fn join(self) -> Result<Outcome> {
        self.join
            .await
            .map_err(|e| Error::Internal(format!("the job task panicked: {e}")))?
    }
}
