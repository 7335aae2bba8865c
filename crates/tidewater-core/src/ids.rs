//! Typed identifiers: checkpoint ids and fencing epochs are not interchangeable numbers.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The number of a checkpoint; increases by one for each checkpoint of a job.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The checkpoint after this one.
    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A fencing token: taking over a job increments it, and every write that
/// commits progress is refused when a newer epoch exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
