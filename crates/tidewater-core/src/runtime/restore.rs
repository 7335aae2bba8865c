//! Restore: finds the newest checkpoint whose data verifies, settles the sinks,
//! and hands every task its state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use tracing::{info, warn};

use super::coordinator::commit_all;
use super::task::read_source_state;
use crate::checkpoint::StateStore;
use crate::checkpoint::manifest::{CheckpointKind, Manifest, OperatorRecord};
use crate::checkpoint::restore::{RestoreOptions, Role, check_compatible};
use crate::error::{Error, Result};
use crate::ids::CheckpointId;
use crate::sink::Sink;
use crate::source::Cursor;

/// The state a run starts from.
#[derive(Default)]
pub(crate) struct Restored {
    /// The checkpoint restored, if any.
    pub checkpoint: Option<CheckpointId>,
    /// Operator state by (uid, subtask).
    pub operator_state: HashMap<(String, usize), RecordBatch>,
    /// Source cursors by uid, then split id.
    pub cursors: HashMap<String, BTreeMap<String, (Option<Cursor>, bool)>>,
    /// Rows the sources had emitted at the checkpoint.
    pub rows_read: u64,
    /// The id the next checkpoint takes.
    pub next_id: CheckpointId,
}

/// What restore found.
pub(crate) enum RestoreResult {
    /// Start (or resume) the job from this state.
    Run(Restored),
    /// The job completed earlier, at this checkpoint.
    AlreadyComplete(CheckpointId),
}

pub(crate) async fn restore(
    store: &StateStore,
    current: &[(OperatorRecord, Role)],
    sinks: &HashMap<String, Arc<dyn Sink>>,
    options: RestoreOptions,
) -> Result<RestoreResult> {
    let (complete, folders) = store.list_checkpoints().await?;
    let next_id = CheckpointId(folders.iter().map(|id| id.0).max().unwrap_or(0) + 1);
    // Checkpoints newer than the one restored, whose committed output must be taken back.
    let mut skipped: Vec<Manifest> = Vec::new();

    for id in complete.iter().rev().copied() {
        let manifest = match store.read_manifest(id).await {
            Ok(manifest) => manifest,
            Err(e @ Error::Corrupt(_)) => {
                return Err(Error::Corrupt(format!(
                    "{e}. Without it tidewater cannot tell which output checkpoint {id} \
                     committed, so it will not guess: move the folder chk-{:020} aside to \
                     resume from the checkpoint before it",
                    id.0
                )));
            }
            Err(e) => return Err(e),
        };
        if manifest.kind == CheckpointKind::Final {
            // Re-commit: the process may have died between the manifest and the commit.
            commit_all(sinks, &manifest.commits).await?;
            return Ok(RestoreResult::AlreadyComplete(id));
        }
        for note in check_compatible(id, &manifest.operators, current, options)? {
            info!(checkpoint = id.0, "{note}");
        }
        match load_state(store, &manifest).await {
            Ok(mut restored) => {
                revert_skipped(sinks, &skipped, id).await?;
                commit_all(sinks, &manifest.commits).await?;
                restored.checkpoint = Some(id);
                restored.rows_read = manifest.rows_read;
                restored.next_id = next_id;
                info!(
                    checkpoint = id.0,
                    rows_read = manifest.rows_read,
                    "restoring"
                );
                return Ok(RestoreResult::Run(restored));
            }
            Err(e @ (Error::Corrupt(_) | Error::Storage { .. })) => {
                warn!(
                    checkpoint = id.0,
                    error = %e,
                    "checkpoint is unusable; falling back to the one before it"
                );
                skipped.push(manifest);
            }
            Err(e) => return Err(e),
        }
    }
    if !skipped.is_empty() {
        warn!("no usable checkpoint: starting from the beginning");
        revert_skipped(sinks, &skipped, CheckpointId(0)).await?;
    }
    Ok(RestoreResult::Run(Restored {
        next_id,
        ..Restored::default()
    }))
}

/// Takes back the output committed by checkpoints past `restored`: the job
/// will produce those rows again.
async fn revert_skipped(
    sinks: &HashMap<String, Arc<dyn Sink>>,
    skipped: &[Manifest],
    restored: CheckpointId,
) -> Result<()> {
    for manifest in skipped {
        for handle in manifest.commits.iter().filter(|h| h.checkpoint > restored) {
            if let Some(sink) = sinks.get(&handle.uid) {
                warn!(
                    sink = %handle.uid,
                    subtask = handle.subtask,
                    checkpoint = handle.checkpoint.0,
                    "taking back output of a checkpoint that cannot be restored"
                );
                sink.revert(handle).await?;
            }
        }
    }
    Ok(())
}

async fn load_state(store: &StateStore, manifest: &Manifest) -> Result<Restored> {
    let mut restored = Restored::default();
    let sources: Vec<&str> = manifest
        .operators
        .iter()
        .filter(|o| o.kind.starts_with("source:"))
        .map(|o| o.uid.as_str())
        .collect();
    for record in &manifest.blobs {
        let batch = store.read_blob(manifest.checkpoint, record).await?;
        if sources.contains(&record.uid.as_str()) {
            let cursors = restored.cursors.entry(record.uid.clone()).or_default();
            read_source_state(&batch, cursors)?;
        } else {
            restored
                .operator_state
                .insert((record.uid.clone(), record.subtask), batch);
        }
    }
    Ok(restored)
}
