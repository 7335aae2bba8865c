//! Checkpoints: what a completed checkpoint records, how it is stored, and the
//! pure decisions taken on restore.

pub mod blob;
mod buffers;
pub mod deltas;
pub mod fence;
pub mod incremental;
mod local_write;
pub mod manifest;
pub mod restore;
pub mod restore_plan;
pub mod store;

pub use manifest::{BlobRecord, CheckpointKind, Manifest, OperatorRecord};
pub use store::StateStore;
