//! `_MANIFEST.json`: the record whose existence makes a checkpoint complete.

use serde::{Deserialize, Serialize};

use crate::ids::{CheckpointId, Epoch};
use crate::partition::PartitionerId;
use crate::sink::CommitHandle;

/// The manifest format version written by this build: 2 added
/// incremental chains (blobs in earlier folders, deltas). A build refuses
/// manifests of a newer format than its own.
pub const MANIFEST_FORMAT: u32 = 2;

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

/// What an operator is to a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads input; its state is cursors keyed by split, so its parallelism
    /// may change.
    Source,
    /// Transforms; keyed or per-subtask state, so its parallelism must stay.
    Operator,
    /// Writes output; its state is commit handles (and, for some sinks, open
    /// output carried across checkpoints).
    Sink,
}

/// One operator of the pipeline as it was when the checkpoint was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredOperatorRecord")]
pub struct OperatorRecord {
    /// The operator's uid.
    pub uid: String,
    /// Whether it is a source, an operator or a sink.
    pub role: Role,
    /// Its kind (e.g. `generator`, `aggregate`, `parquet`).
    pub kind: String,
    /// The version of its state schema; `None` for stateless operators.
    pub state_version: Option<u32>,
    /// Its parallelism.
    pub parallelism: usize,
    /// Whether its state can be restored at another parallelism: keyed
    /// state split by key group, or a sink that moves its writers' state.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rescalable: bool,
}

/// An operator record as stored. Manifests written before roles were
/// recorded spelled them as a `source:` or `sink:` prefix of the kind.
#[derive(Deserialize)]
struct StoredOperatorRecord {
    uid: String,
    #[serde(default)]
    role: Option<Role>,
    kind: String,
    state_version: Option<u32>,
    parallelism: usize,
    #[serde(default)]
    rescalable: bool,
}

impl From<StoredOperatorRecord> for OperatorRecord {
    fn from(stored: StoredOperatorRecord) -> Self {
        let (role, kind) = match (stored.role, stored.kind) {
            (Some(role), kind) => (role, kind),
            (None, kind) => match (kind.strip_prefix("source:"), kind.strip_prefix("sink:")) {
                (Some(k), _) => (Role::Source, k.to_string()),
                (_, Some(k)) => (Role::Sink, k.to_string()),
                _ => (Role::Operator, kind),
            },
        };
        OperatorRecord {
            uid: stored.uid,
            role,
            kind,
            state_version: stored.state_version,
            parallelism: stored.parallelism,
            rescalable: stored.rescalable,
        }
    }
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
    /// The checkpoint whose folder holds the blob, when it is an earlier
    /// one: a base or delta an incremental checkpoint shares with the
    /// checkpoints before it. `None`: this checkpoint's own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_in: Option<CheckpointId>,
    /// The blob holds only the rows of keys changed since the blob listed
    /// before it for the same operator subtask (an incremental delta);
    /// `false`: the subtask's whole state, or the base of its chain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delta: bool,
}

impl BlobRecord {
    /// How errors name the blob, as listed by checkpoint `id`'s manifest.
    pub fn describe(&self, id: CheckpointId) -> String {
        format!("checkpoint {id}, blob '{}'", self.path)
    }
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
    /// The partitioner that placed keyed state in subtasks; `None` in
    /// manifests written before it was recorded (which used another one).
    #[serde(default)]
    pub partitioner: Option<PartitionerId>,
    /// How many key groups keyed state is split into: fixed when the job
    /// first starts. `None` in manifests written before key groups.
    #[serde(default)]
    pub key_groups: Option<u32>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_older_manifests_get_their_role_from_the_kind_prefix() {
        let cases = [
            (
                r#"{"uid":"g","kind":"source:generator","state_version":1,"parallelism":2}"#,
                Role::Source,
                "generator",
            ),
            (
                r#"{"uid":"o","kind":"sink:parquet","state_version":1,"parallelism":2}"#,
                Role::Sink,
                "parquet",
            ),
            (
                r#"{"uid":"a","kind":"aggregate","state_version":1,"parallelism":2}"#,
                Role::Operator,
                "aggregate",
            ),
            (
                r#"{"uid":"g","role":"source","kind":"generator","state_version":1,"parallelism":2}"#,
                Role::Source,
                "generator",
            ),
        ];
        for (json, role, kind) in cases {
            let record: OperatorRecord = serde_json::from_str(json).unwrap();
            assert_eq!((record.role, record.kind.as_str()), (role, kind), "{json}");
            let again: OperatorRecord =
                serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
            assert_eq!(again, record);
        }
    }
}
