//! `_MANIFEST.json`: the record whose existence makes a checkpoint complete.

use serde::{Deserialize, Serialize};

use crate::ids::{CheckpointId, Epoch};
use crate::sink::CommitHandle;

/// The manifest format version written by this build.
pub const MANIFEST_FORMAT: u32 = 1;

/// Why a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// A periodic checkpoint (time or row interval).
    Periodic,
    /// Taken on cancel; the job stopped after it.
    Savepoint,
    /// Taken when all input ended: the job is complete.
    Final,
}

/// One operator of the pipeline as it was when the checkpoint was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorRecord {
    /// The operator's uid.
    pub uid: String,
    /// Its kind (e.g. `aggregate`, `parquet-sink`).
    pub kind: String,
    /// The version of its state schema; `None` for stateless operators.
    pub state_version: Option<u32>,
    /// Its parallelism.
    pub parallelism: usize,
}

/// One state blob: the state of one subtask of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRecord {
    /// The operator's uid.
    pub uid: String,
    /// The subtask.
    pub subtask: usize,
    /// Path relative to the checkpoint folder.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 of the bytes.
    pub crc32: u32,
}

/// The manifest of a completed checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub format: u32,
    /// The job's name.
    pub job: String,
    /// The checkpoint's id.
    pub checkpoint: CheckpointId,
    /// Why it was taken.
    pub kind: CheckpointKind,
    /// The epoch of the worker that wrote it.
    pub epoch: Epoch,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Hash of the pipeline's operators and edges, for diagnostics.
    pub fingerprint: String,
    /// Every operator of the pipeline.
    pub operators: Vec<OperatorRecord>,
    /// Every state blob.
    pub blobs: Vec<BlobRecord>,
    /// Sink work pre-committed for this checkpoint, committed once the
    /// manifest exists (and again on restore: commits are idempotent).
    pub commits: Vec<CommitHandle>,
    /// Rows the sources had emitted when the checkpoint was taken.
    pub rows_read: u64,
}
