//! The [`Source`] trait: a bounded or unbounded input divided into splits with cursors.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use crate::error::Result;
use crate::operator::TaskContext;

/// Where a split reader stands, in the connector's own terms (a last key, a
/// file offset, a Kafka offset). Stored as JSON in every checkpoint.
pub type Cursor = serde_json::Value;

/// One independently readable part of a source's input.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Stable across runs with the same configuration: cursors are keyed by it.
    pub id: String,
    /// Rows this split holds, when known (feeds progress).
    pub estimated_rows: Option<u64>,
}

/// An input divided into splits. One instance is shared by all subtasks of
/// the source; split `j` is read by subtask `j % parallelism`.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// A short name for the source's kind, recorded in checkpoints.
    fn kind(&self) -> &str;

    /// The schema of every batch the source emits.
    fn schema(&self) -> SchemaRef;

    /// Refuses a configuration that cannot mean anything (a zero batch size,
    /// no keys): called when the source joins a pipeline, and reported by
    /// `build`. The default accepts everything.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// The splits of the whole input. Must be the same on every run with the
    /// same configuration: a restore refuses a checkpoint whose splits differ.
    async fn splits(&self) -> Result<Vec<Split>>;

    /// The splits to resume with, rebuilt from the split ids of a checkpoint,
    /// for sources whose plan depends on data that may have moved since (a
    /// table's key range). `None` (the default) uses [`splits`](Source::splits),
    /// and the restore refuses the checkpoint if the ids differ.
    async fn resume_splits(&self, _checkpointed: &[String]) -> Result<Option<Vec<Split>>> {
        Ok(None)
    }

    /// Opens a reader on `split`, positioned after `cursor` when one was
    /// checkpointed, else at the split's start.
    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>>;

    /// [`open`](Source::open) for one subtask of a running job: what the
    /// runtime calls. Sources that name their connections after the task
    /// (PostgreSQL's `application_name`) override it; the default ignores `task`.
    async fn open_for(
        &self,
        task: &TaskContext,
        split: &Split,
        cursor: Option<&Cursor>,
    ) -> Result<Box<dyn SplitReader>> {
        let _ = task;
        self.open(split, cursor).await
    }
}

/// Reads one split in batches.
#[async_trait]
pub trait SplitReader: Send {
    /// The next batch, or `None` when the split is exhausted.
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>>;

    /// The position after the last batch returned.
    fn cursor(&self) -> Cursor;
}
