//! Restore, the I/O half: reads what storage holds for
//! [`plan_restore`](crate::checkpoint::restore_plan::plan_restore), carries
//! out its plan on the sinks, and hands every task its state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use futures::{StreamExt, TryStreamExt, stream};

use super::coordinator::commit_all;
use super::task::read_source_state;
use crate::checkpoint::deltas::apply_deltas;
use crate::checkpoint::manifest::{BlobRecord, Manifest, OperatorRecord, Role};
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
    // Operator state as the slices it was written in, and the deltas after
    // it: a chain's base is never joined on its own, applying the deltas
    // picks its surviving rows from the slices in one copy.
    let mut states: BTreeMap<(String, usize), (&BlobRecord, Vec<RecordBatch>)> = BTreeMap::new();
    let mut deltas: BTreeMap<(String, usize), Vec<RecordBatch>> = BTreeMap::new();
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
        } else if sources.contains(&record.uid.as_str()) {
            let batch = blob::join(&slices, &record.describe(manifest.checkpoint))?;
            let cursors = restored.cursors.entry(record.uid.clone()).or_default();
            read_source_state(&batch, cursors)?;
        } else {
            states.insert(at, (record, slices));
        }
    }
    let unusable_chain = |(uid, subtask): (String, usize)| {
        let detail = if state_keys.contains_key(&uid) {
            format!("subtask {subtask}: its manifest lists deltas but no base before them")
        } else {
            "has incremental deltas in the checkpoint, but the operator no longer names its \
             state's key columns (Operator::state_keys), so they cannot be applied"
                .to_string()
        };
        Error::IncompatibleState {
            uid,
            checkpoint: manifest.checkpoint,
            detail,
        }
    };
    for (at, (record, slices)) in states {
        let state = match deltas.remove(&at) {
            None => blob::join(&slices, &record.describe(manifest.checkpoint))?,
            Some(chain) => {
                let Some(keys) = state_keys.get(&at.0) else {
                    return Err(unusable_chain(at));
                };
                // Still `Corrupt`, so that the restore falls back past this checkpoint.
                apply_deltas(&slices, &chain, keys).map_err(|e| match e {
                    Error::Corrupt(why) => Error::Corrupt(format!(
                        "checkpoint {}, operator '{}' subtask {}: {why}",
                        manifest.checkpoint, at.0, at.1
                    )),
                    other => other,
                })?
            }
        };
        restored.operator_state.insert(at, state);
    }
    if let Some((at, _)) = deltas.into_iter().next() {
        return Err(unusable_chain(at));
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;
    use crate::checkpoint::blob::encode;
    use crate::checkpoint::manifest::{CheckpointKind, MANIFEST_FORMAT};
    use crate::ids::Epoch;
    use crate::store_url::open_location;

    fn batch(k: Vec<i64>, v: Vec<i64>) -> RecordBatch {
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(k)) as _),
            ("v", Arc::new(Int64Array::from(v)) as _),
        ])
        .unwrap()
    }

    /// A checkpoint of operator `agg` (one subtask) listing `blobs` in
    /// order, each written in a folder of its own as a chain's are.
    async fn checkpoint(blobs: Vec<(bool, RecordBatch)>) -> (StateStore, Manifest) {
        let store = StateStore::new(&open_location("memory://state").unwrap(), "job");
        let mut records = Vec::new();
        for (i, (delta, state)) in blobs.into_iter().enumerate() {
            let written_in = CheckpointId(i as u64 + 1);
            let bytes = encode(&state).unwrap();
            let record = store.put_blob(written_in, "agg", 0, bytes).await.unwrap();
            records.push(BlobRecord {
                written_in: Some(written_in),
                delta,
                ..record
            });
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            job: "job".into(),
            checkpoint: CheckpointId(records.len() as u64),
            kind: CheckpointKind::Periodic,
            epoch: Epoch(1),
            created_at_ms: 0,
            fingerprint: String::new(),
            partitioner: None,
            key_groups: None,
            operators: vec![OperatorRecord {
                uid: "agg".into(),
                role: Role::Operator,
                kind: "aggregate".into(),
                state_version: Some(1),
                parallelism: 1,
                rescalable: false,
            }],
            blobs: records,
            commits: vec![],
            rows_read: 0,
        };
        (store, manifest)
    }

    fn refused(result: Result<Restored>) -> Error {
        match result {
            Ok(_) => panic!("the checkpoint was restored"),
            Err(e) => e,
        }
    }

    fn keys_of_agg() -> HashMap<String, Vec<String>> {
        HashMap::from([("agg".to_string(), vec!["k".to_string()])])
    }

    #[tokio::test]
    async fn a_chain_is_applied_to_its_base_and_a_whole_state_is_kept_as_read() {
        let base = batch(vec![1, 2, 3], vec![10, 20, 30]);
        let (store, manifest) = checkpoint(vec![
            (false, base.clone()),
            (true, batch(vec![2, 4], vec![21, 40])),
            (true, batch(vec![4], vec![41])),
        ])
        .await;
        let restored = load_state(&store, &manifest, &keys_of_agg()).await.unwrap();
        assert_eq!(
            restored.operator_state[&("agg".to_string(), 0)],
            batch(vec![1, 3, 2, 4], vec![10, 30, 21, 41])
        );

        let (store, manifest) = checkpoint(vec![(false, base.clone())]).await;
        let restored = load_state(&store, &manifest, &HashMap::new())
            .await
            .unwrap();
        assert_eq!(restored.operator_state[&("agg".to_string(), 0)], base);
    }

    #[tokio::test]
    async fn deltas_without_a_base_or_without_key_columns_are_refused_by_name() {
        let delta = batch(vec![2], vec![21]);
        let (store, manifest) = checkpoint(vec![(true, delta.clone())]).await;
        let err = refused(load_state(&store, &manifest, &keys_of_agg()).await);
        assert!(
            matches!(&err, Error::IncompatibleState { uid, .. } if uid == "agg"),
            "{err:?}"
        );
        assert!(err.to_string().contains("no base before them"), "{err}");

        let base = batch(vec![1], vec![10]);
        let (store, manifest) = checkpoint(vec![(false, base), (true, delta)]).await;
        let err = refused(load_state(&store, &manifest, &HashMap::new()).await);
        assert!(err.to_string().contains("Operator::state_keys"), "{err}");
    }
}
