//! The [`Sink`] trait: transactional (two-phase commit) or idempotent outputs.

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::CheckpointId;
use crate::operator::TaskContext;

/// What a sink writer pre-committed for one checkpoint: enough for
/// [`Sink::commit`] to publish it, in any later process. Stored in the
/// checkpoint's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitHandle {
    /// The sink's uid.
    pub uid: String,
    /// The writer's subtask.
    pub subtask: usize,
    /// The checkpoint whose data this is.
    pub checkpoint: CheckpointId,
    /// Connector-specific details (staged file names, a transaction id, ...).
    pub payload: serde_json::Value,
}

/// An output with exactly-once effects under restarts.
///
/// Writers stage data and pre-commit it at each checkpoint barrier; the
/// coordinator calls [`commit`](Sink::commit) only after the checkpoint's
/// manifest exists, and again on restore (so commit must be idempotent).
#[async_trait]
pub trait Sink: Send + Sync + 'static {
    /// A short name for the sink's kind, recorded in checkpoints.
    fn kind(&self) -> &str;

    /// The version of the state [`SinkWriter::snapshot`] writes, or `None`
    /// (the default) for a sink whose writers carry nothing across a
    /// checkpoint. A sink with state keeps its parallelism across restores.
    fn state_version(&self) -> Option<u32> {
        None
    }

    /// Opens the writer of one subtask.
    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>>;

    /// Opens the writer of one subtask so that it continues from `state`, what
    /// [`SinkWriter::snapshot`] returned at the checkpoint being restored
    /// (after that checkpoint's handles were committed).
    async fn resume_writer(
        &self,
        ctx: &TaskContext,
        state: RecordBatch,
    ) -> Result<Box<dyn SinkWriter>> {
        let _ = state;
        Err(Error::InvalidPipeline(format!(
            "sink '{}' (kind {}) has writer state in the checkpoint being restored (its writers \
             returned it from SinkWriter::snapshot), but the sink does not implement \
             Sink::resume_writer: implement it to reopen a writer from that state",
            ctx.uid,
            self.kind()
        )))
    }

    /// Whether [`rescale`](Sink::rescale) can move writer state taken at
    /// one parallelism to another. `false` (the default) refuses a restore
    /// that changes the parallelism of a sink with writer state.
    fn rescales(&self) -> bool {
        false
    }

    /// Hands writer state taken at another parallelism to the new writers:
    /// `states[i]` is what old subtask `i` carried (`None` when nothing);
    /// returns one state per new subtask of `ctx.parallelism`. Called on
    /// restore, after the restored checkpoint's handles were committed and
    /// before any writer opens, and again on every later restore of the same
    /// checkpoint, so what it publishes must be published idempotently.
    /// `checkpoint` is the one restored. An error says what cannot move and
    /// why.
    async fn rescale(
        &self,
        ctx: &TaskContext,
        checkpoint: CheckpointId,
        states: Vec<Option<RecordBatch>>,
    ) -> Result<Vec<Option<RecordBatch>>> {
        let _ = (checkpoint, states);
        Err(Error::InvalidPipeline(format!(
            "sink '{}' (kind {}) cannot move its writers' state to another parallelism",
            ctx.uid,
            self.kind()
        )))
    }

    /// Publishes what a writer pre-committed. Idempotent: committing an
    /// already committed handle changes nothing.
    async fn commit(&self, handle: &CommitHandle) -> Result<()>;

    /// Discards staged work that no completed checkpoint refers to. Called on
    /// restore, after the restored checkpoint's handles were committed and
    /// before any writer opens. `job` and `uid` name the job and the sink.
    async fn abort_uncommitted(&self, job: &str, uid: &str) -> Result<()>;

    /// Discards the staged work of epoch `epoch` only: called by a run that
    /// was superseded (fenced, or its lease lost), after its tasks stopped,
    /// so that what it pre-committed after its successor's restore does not
    /// linger (a PostgreSQL prepared transaction holds locks until resolved).
    /// The default does nothing: for sinks whose staged work costs nothing
    /// while it waits for the next restore.
    async fn abort_epoch(&self, job: &str, uid: &str, epoch: crate::Epoch) -> Result<()> {
        let _ = (job, uid, epoch);
        Ok(())
    }

    /// Takes back the published output of a handle. Needed only when a restore
    /// falls back past a completed checkpoint whose state is corrupt; sinks that
    /// cannot revert make such a restore fail instead of duplicating output.
    async fn revert(&self, handle: &CommitHandle) -> Result<()> {
        Err(Error::External {
            message: format!(
                "sink '{}' (kind {}) cannot take back the output of checkpoint {}: \
                 restoring past it would duplicate that output",
                handle.uid,
                self.kind(),
                handle.checkpoint
            ),
            retryable: false,
        })
    }
}

/// The writing half of a sink, one per subtask.
#[async_trait]
pub trait SinkWriter: Send {
    /// Stages a batch.
    async fn write(&mut self, batch: RecordBatch) -> Result<()>;

    /// Makes everything written since the last pre-commit durable but not
    /// visible, and returns the payload of its [`CommitHandle`], or `None`
    /// when nothing was written.
    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Option<serde_json::Value>>;

    /// The input ended: the next [`pre_commit`](SinkWriter::pre_commit) is
    /// the last, so it must include everything the writer still carries.
    async fn finish(&mut self) -> Result<()> {
        Ok(())
    }

    /// What the writer carries across the checkpoint it just pre-committed
    /// (a file still being written, say), stored with the checkpoint and
    /// handed to [`Sink::resume_writer`] on restore. Called right after
    /// [`pre_commit`](SinkWriter::pre_commit), only for sinks whose
    /// [`Sink::state_version`] is set.
    async fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        Ok(None)
    }
}
