//! Restore, the I/O half: reads what storage holds for
//! [`plan_restore`](crate::checkpoint::restore_plan::plan_restore), carries
//! out its plan on the sinks, and hands every task its state.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use futures::{StreamExt, TryStreamExt, stream};

use super::coordinator::commit_all;
use super::task::read_source_state;
use crate::checkpoint::deltas::apply_deltas;
use crate::checkpoint::manifest::{Manifest, OperatorRecord, Role};
use crate::checkpoint::restore::RestoreOptions;
use crate::checkpoint::restore_plan::{
    BlobCheck, Decision, ObservedCheckpoint, RestoreFacts, Start, plan_restore,
};
use crate::checkpoint::{StateStore, blob};
use crate::error::{Error, Result};
use crate::events::{
    CheckpointFallback, CheckpointRestored, InternalEvent, RestoreChange, SinkReverted,
    StartedFresh,
};
use crate::ids::CheckpointId;
use crate::sink::Sink;
use crate::source::Cursor;

/// Manifests or blobs read at once: a restore from an object store waits on
/// one round trip per object, and a chain of deltas is dozens of objects.
const READS_IN_FLIGHT: usize = 8;

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
    /// Checkpoints passed over as unusable, with why.
    pub fallbacks: Vec<(CheckpointId, String)>,
    /// The restored checkpoint's key group count (`None` for a fresh start
    /// or a manifest from before key groups).
    pub key_groups: Option<u32>,
    /// The restored checkpoint's partitioner.
    pub partitioner: Option<crate::partition::PartitionerId>,
    /// The parallelism of each operator in the restored checkpoint.
    pub parallelism: HashMap<String, usize>,
}

/// What restore found.
pub(crate) enum RestoreResult {
    /// Start (or resume) the job from this state.
    Run(Box<Restored>),
    /// The job completed earlier, at this checkpoint.
    AlreadyComplete(CheckpointId),
}

/// Carries out a restore: gathers what storage holds, lets
/// [`plan_restore`] decide, reverts and commits what the plan says, and
/// returns the state the run starts from.
pub(crate) async fn restore(
    store: &StateStore,
    current: &[OperatorRecord],
    sinks: &HashMap<String, Arc<dyn Sink>>,
    options: RestoreOptions,
    keyed: Option<&str>,
    state_keys: &HashMap<String, Vec<String>>,
) -> Result<RestoreResult> {
    let (complete, folders) = store.list_checkpoints().await?;
    // Futures gathered first: a stream over a closure that borrows is not
    // `Send` in general, which the job's task must be.
    let reads: Vec<_> = complete
        .into_iter()
        .map(|id| async move {
            match store.read_manifest(id).await {
                Ok(manifest) => Ok(ObservedCheckpoint::Manifest(Box::new(manifest))),
                Err(e @ Error::Corrupt(_)) => Ok(ObservedCheckpoint::Unreadable {
                    id,
                    reason: e.to_string(),
                }),
                Err(e) => Err(e),
            }
        })
        .collect();
    let checkpoints: Vec<ObservedCheckpoint> = stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    let partitioner = crate::partition::partitioner();
    let mut blobs = HashMap::new();
    let mut loaded: Option<Restored> = None;
    let plan = loop {
        let facts = RestoreFacts {
            checkpoints: &checkpoints,
            folders: &folders,
            blobs: &blobs,
            pipeline: current,
            keyed,
            partitioner: &partitioner,
            options,
        };
        match plan_restore(facts)? {
            Decision::Plan(plan) => break plan,
            Decision::VerifyBlobs(id) => {
                let manifest = checkpoints
                    .iter()
                    .find_map(|c| match c {
                        ObservedCheckpoint::Manifest(m) if m.checkpoint == id => Some(m),
                        _ => None,
                    })
                    .ok_or_else(|| Error::Internal(format!("no manifest for checkpoint {id}")))?;
                match load_state(store, manifest, state_keys).await {
                    Ok(state) => {
                        loaded = Some(state);
                        blobs.insert(id, BlobCheck::Whole);
                    }
                    Err(e @ (Error::Corrupt(_) | Error::Storage { .. })) => {
                        let why = e.to_string();
                        CheckpointFallback {
                            job: store.job(),
                            checkpoint: id.0,
                            error: &why,
                        }
                        .emit();
                        blobs.insert(id, BlobCheck::Unusable(why));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    };
    for note in &plan.notes {
        RestoreChange {
            job: store.job(),
            note,
        }
        .emit();
    }
    for handle in &plan.revert {
        if let Some(sink) = sinks.get(&handle.uid) {
            SinkReverted {
                job: store.job(),
                uid: &handle.uid,
                subtask: handle.subtask,
                checkpoint: handle.checkpoint.0,
            }
            .emit();
            sink.revert(handle)
                .await
                .map_err(|e| e.in_operator(&handle.uid, handle.subtask))?;
        }
    }
    commit_all(store.job(), sinks, &plan.commit).await?;
    match plan.start {
        Start::AlreadyComplete(checkpoint) => Ok(RestoreResult::AlreadyComplete(checkpoint)),
        Start::Fresh => {
            StartedFresh {
                job: store.job(),
                after_fallbacks: !plan.fallbacks.is_empty(),
            }
            .emit();
            Ok(RestoreResult::Run(Box::new(Restored {
                next_id: plan.next_id,
                fallbacks: plan.fallbacks,
                ..Restored::default()
            })))
        }
        Start::Resume(checkpoint) => {
            // The plan resumes from the one checkpoint whose blobs were read whole.
            let mut restored = loaded
                .ok_or_else(|| Error::Internal(format!("checkpoint {checkpoint} not loaded")))?;
            restored.checkpoint = Some(checkpoint);
            restored.next_id = plan.next_id;
            restored.fallbacks = plan.fallbacks;
            CheckpointRestored {
                job: store.job(),
                checkpoint: checkpoint.0,
                rows_read: restored.rows_read,
            }
            .emit();
            Ok(RestoreResult::Run(Box::new(restored)))
        }
    }
}

/// Reads and verifies every blob of a checkpoint: the source cursors and
/// the operator and sink state, with each incremental chain applied (a
/// chain's blobs are listed base first, in order; `state_keys` names the
/// key columns of each operator's state by uid).
async fn load_state(
    store: &StateStore,
    manifest: &Manifest,
    state_keys: &HashMap<String, Vec<String>>,
) -> Result<Restored> {
    let mut restored = Restored {
        rows_read: manifest.rows_read,
        key_groups: manifest.key_groups,
        partitioner: manifest.partitioner.clone(),
        parallelism: manifest
            .operators
            .iter()
            .map(|o| (o.uid.clone(), o.parallelism))
            .collect(),
        ..Restored::default()
    };
    let sources: Vec<&str> = manifest
        .operators
        .iter()
        .filter(|o| o.role == Role::Source)
        .map(|o| o.uid.as_str())
        .collect();
    let mut deltas: BTreeMap<(String, usize), Vec<RecordBatch>> = BTreeMap::new();
    // A chain's base stays in the slices it was written in: applying the
    // deltas picks its surviving rows from them in one copy.
    let mut bases: HashMap<(String, usize), Vec<RecordBatch>> = HashMap::new();
    let chained: HashSet<(&str, usize)> = manifest
        .blobs
        .iter()
        .filter(|record| record.delta)
        .map(|record| (record.uid.as_str(), record.subtask))
        .collect();
    // In the manifest's order (a chain's base first), several reads at a time.
    let reads: Vec<_> = manifest
        .blobs
        .iter()
        .map(|record| async move {
            let slices = store.read_blob_slices(manifest.checkpoint, record).await?;
            Ok::<_, Error>((record, slices))
        })
        .collect();
    let mut reads = stream::iter(reads).buffered(READS_IN_FLIGHT);
    while let Some((record, slices)) = reads.try_next().await? {
        let at = (record.uid.clone(), record.subtask);
        if record.delta {
            deltas.entry(at).or_default().extend(slices);
        } else if chained.contains(&(record.uid.as_str(), record.subtask)) {
            bases.insert(at, slices);
        } else {
            let batch = blob::join(&slices, &record.describe(manifest.checkpoint))?;
            if sources.contains(&record.uid.as_str()) {
                let cursors = restored.cursors.entry(record.uid.clone()).or_default();
                read_source_state(&batch, cursors)?;
            } else {
                restored.operator_state.insert(at, batch);
            }
        }
    }
    for ((uid, subtask), chain) in deltas {
        let at = (uid, subtask);
        let (Some(base), Some(keys)) = (bases.remove(&at), state_keys.get(&at.0)) else {
            let detail = if state_keys.contains_key(&at.0) {
                format!("subtask {subtask}: its manifest lists deltas but no base before them")
            } else {
                "has incremental deltas in the checkpoint, but the operator no longer names its \
                 state's key columns (Operator::state_keys), so they cannot be applied"
                    .to_string()
            };
            return Err(Error::IncompatibleState {
                uid: at.0,
                checkpoint: manifest.checkpoint,
                detail,
            });
        };
        // Still `Corrupt`, so that the restore falls back past this checkpoint.
        let merged = apply_deltas(&base, &chain, keys).map_err(|e| match e {
            Error::Corrupt(why) => Error::Corrupt(format!(
                "checkpoint {}, operator '{}' subtask {subtask}: {why}",
                manifest.checkpoint, at.0
            )),
            other => other,
        })?;
        restored.operator_state.insert(at, merged);
    }
    Ok(restored)
}
