//! What travels on a channel between tasks.

use arrow::record_batch::RecordBatch;

use crate::ids::CheckpointId;

/// One element of a data channel.
#[derive(Debug, Clone)]
pub(crate) enum Message {
    /// Data.
    Batch(RecordBatch),
    /// Everything before this belongs to checkpoint n; everything after, to n + 1.
    Barrier(CheckpointId),
    /// The input has ended; the final checkpoint has this id.
    End(CheckpointId),
}
