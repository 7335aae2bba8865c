//! Checkpoints: what a completed checkpoint records, how it is stored, and the
//! pure decisions taken on restore.

pub mod blob;
pub mod deltas;
pub mod fence;
pub mod incremental;
mod local_folders;
mod local_write;
pub mod manifest;
pub mod restore;
pub mod restore_plan;
pub mod store;
mod upload;

pub use manifest::{BlobRecord, CheckpointKind, Manifest, OperatorRecord};
pub use store::StateStore;

use crate::error::{Error, Result};

/// Starts CPU work (encoding a blob) on a blocking thread at once, off the
/// async workers; the future is its outcome.
fn off_task<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> impl Future<Output = Result<T>> {
    let handle = tokio::task::spawn_blocking(work);
    async move {
        handle
            .await
            .map_err(|e| Error::Internal(format!("state encoder panicked: {e}")))?
    }
}
