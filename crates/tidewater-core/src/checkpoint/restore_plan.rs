//! Which checkpoint a run starts from, and what it does to the sinks first.
//!
//! A pure decision over what storage observed, in the shape of Arroyo's
//! state protocol: the runtime reads the manifests, asks [`plan_restore`],
//! reads and verifies the blobs of the checkpoint it names
//! ([`Decision::VerifyBlobs`]), records the result and asks again, until it
//! gets a [`RestorePlan`], which it then carries out. Every branch (fresh
//! start, resume, already complete, fall back past a corrupt blob, an
//! unreadable manifest, a pipeline that changed) is a row of a table test.

use std::collections::HashMap;

use crate::checkpoint::manifest::{CheckpointKind, Manifest, OperatorRecord};
use crate::checkpoint::restore::{RestoreOptions, check_compatible, check_partitioner};
use crate::error::{Error, Result};
use crate::ids::CheckpointId;
use crate::partition::PartitionerId;
use crate::sink::CommitHandle;

/// What storage found for one complete checkpoint (one with a manifest).
#[derive(Debug, Clone)]
pub enum ObservedCheckpoint {
    /// The manifest was read.
    Manifest(Box<Manifest>),
    /// The manifest exists but does not parse.
    Unreadable {
        /// The checkpoint.
        id: CheckpointId,
        /// Why it does not parse.
        reason: String,
    },
}

impl ObservedCheckpoint {
    fn id(&self) -> CheckpointId {
        match self {
            ObservedCheckpoint::Manifest(m) => m.checkpoint,
            ObservedCheckpoint::Unreadable { id, .. } => *id,
        }
    }
}

/// Whether a checkpoint's state blobs read back whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobCheck {
    /// Every blob is there and matches its checksum.
    Whole,
    /// A blob is missing, unreadable or corrupt: why.
    Unusable(String),
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct RestoreFacts<'a> {
    /// The complete checkpoints, in any order.
    pub checkpoints: &'a [ObservedCheckpoint],
    /// Every checkpoint folder, complete or not (the next id is past them).
    pub folders: &'a [CheckpointId],
    /// The blob checks made so far.
    pub blobs: &'a HashMap<CheckpointId, BlobCheck>,
    /// The pipeline being started.
    pub pipeline: &'a [OperatorRecord],
    /// An operator whose state depends on the partitioner, if any.
    pub keyed: Option<&'a str>,
    /// This build's partitioner.
    pub partitioner: &'a PartitionerId,
    /// Which pipeline changes are accepted.
    pub options: RestoreOptions,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Read and verify the blobs of this checkpoint, record the result in
    /// [`RestoreFacts::blobs`], and decide again.
    VerifyBlobs(CheckpointId),
    /// The plan.
    Plan(RestorePlan),
}

/// Where the run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From the beginning, with empty state.
    Fresh,
    /// From this checkpoint's state.
    Resume(CheckpointId),
    /// Nowhere: the job completed at this (final) checkpoint.
    AlreadyComplete(CheckpointId),
}

/// The restore to carry out, in this order: revert, then commit, then start.
#[derive(Debug, Clone, PartialEq)]
pub struct RestorePlan {
    /// Where the run starts.
    pub start: Start,
    /// Output to take back: what checkpoints newer than the start (which
    /// cannot be restored) committed; the run produces it again.
    pub revert: Vec<CommitHandle>,
    /// Output to commit (again: commits are idempotent): the start
    /// checkpoint's, since the process may have died between its manifest
    /// and its commit.
    pub commit: Vec<CommitHandle>,
    /// Checkpoints passed over, newest first, with why.
    pub fallbacks: Vec<(CheckpointId, String)>,
    /// Pipeline changes accepted, worth logging.
    pub notes: Vec<String>,
    /// The id the run's first checkpoint takes.
    pub next_id: CheckpointId,
}

/// Decides the restore from what storage observed. Tries the newest
/// complete checkpoint first; one whose blobs do not verify is passed over
/// (its committed output reverted) for the one before it. Refuses, rather
/// than guesses, when a manifest is unreadable (which output did it commit?)
/// or when the pipeline no longer fits the checkpoint.
pub fn plan_restore(facts: RestoreFacts<'_>) -> Result<Decision> {
    let next_id = CheckpointId(facts.folders.iter().map(|id| id.0).max().unwrap_or(0) + 1);
    let mut newest_first: Vec<&ObservedCheckpoint> = facts.checkpoints.iter().collect();
    newest_first.sort_by_key(|c| std::cmp::Reverse(c.id()));

    let mut passed: Vec<&Manifest> = Vec::new();
    let mut fallbacks = Vec::new();
    for observed in newest_first {
        let manifest = match observed {
            ObservedCheckpoint::Manifest(manifest) => manifest,
            ObservedCheckpoint::Unreadable { id, reason } => {
                return Err(Error::Corrupt(format!(
                    "the manifest of checkpoint {id} cannot be read ({reason}). Without it \
                     tidewater cannot tell which output checkpoint {id} committed, so it will \
                     not guess: move the folder chk-{:020} aside to resume from the checkpoint \
                     before it",
                    id.0
                )));
            }
        };
        let id = manifest.checkpoint;
        if manifest.kind == CheckpointKind::Final {
            return Ok(Decision::Plan(RestorePlan {
                start: Start::AlreadyComplete(id),
                revert: Vec::new(),
                commit: manifest.commits.clone(),
                fallbacks,
                notes: Vec::new(),
                next_id,
            }));
        }
        let notes = check_compatible(id, &manifest.operators, facts.pipeline, facts.options)?;
        check_partitioner(
            id,
            manifest.partitioner.as_ref(),
            facts.partitioner,
            facts.keyed,
        )?;
        match facts.blobs.get(&id) {
            None => return Ok(Decision::VerifyBlobs(id)),
            Some(BlobCheck::Whole) => {
                return Ok(Decision::Plan(RestorePlan {
                    start: Start::Resume(id),
                    revert: committed_after(&passed, id),
                    commit: manifest.commits.clone(),
                    fallbacks,
                    notes,
                    next_id,
                }));
            }
            Some(BlobCheck::Unusable(why)) => {
                fallbacks.push((id, why.clone()));
                passed.push(manifest);
            }
        }
    }
    Ok(Decision::Plan(RestorePlan {
        start: Start::Fresh,
        revert: committed_after(&passed, CheckpointId(0)),
        commit: Vec::new(),
        fallbacks,
        notes: Vec::new(),
        next_id,
    }))
}

/// The handles the passed-over checkpoints committed for checkpoints after
/// `start`.
fn committed_after(passed: &[&Manifest], start: CheckpointId) -> Vec<CommitHandle> {
    passed
        .iter()
        .flat_map(|m| m.commits.iter())
        .filter(|h| h.checkpoint > start)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::{MANIFEST_FORMAT, Role};
    use crate::ids::Epoch;
    use crate::partition::partitioner;

    fn op(uid: &str, role: Role, kind: &str) -> OperatorRecord {
        OperatorRecord {
            uid: uid.into(),
            role,
            kind: kind.into(),
            state_version: Some(1),
            parallelism: 2,
            rescalable: false,
        }
    }

    fn pipeline() -> Vec<OperatorRecord> {
        vec![
            op("gen", Role::Source, "generator"),
            op("agg", Role::Operator, "aggregate"),
            op("out", Role::Sink, "parquet"),
        ]
    }

    fn handle(checkpoint: u64) -> CommitHandle {
        CommitHandle {
            uid: "out".into(),
            subtask: 0,
            checkpoint: CheckpointId(checkpoint),
            payload: serde_json::json!({ "n": checkpoint }),
        }
    }

    fn manifest(id: u64, kind: CheckpointKind) -> ObservedCheckpoint {
        ObservedCheckpoint::Manifest(Box::new(Manifest {
            format: MANIFEST_FORMAT,
            job: "job".into(),
            checkpoint: CheckpointId(id),
            kind,
            epoch: Epoch(1),
            created_at_ms: 0,
            fingerprint: String::new(),
            partitioner: Some(partitioner()),
            key_groups: Some(4096),
            operators: pipeline(),
            blobs: Vec::new(),
            commits: vec![handle(id)],
            rows_read: id * 100,
        }))
    }

    fn periodic(id: u64) -> ObservedCheckpoint {
        manifest(id, CheckpointKind::Periodic)
    }

    /// Runs the decision loop with `checks` as the blob verifier; returns the
    /// checkpoints it asked to verify and the plan.
    fn run(
        checkpoints: &[ObservedCheckpoint],
        current: &[OperatorRecord],
        check: impl Fn(CheckpointId) -> BlobCheck,
    ) -> Result<(Vec<u64>, RestorePlan)> {
        let folders: Vec<CheckpointId> = checkpoints.iter().map(|c| c.id()).collect();
        let mut blobs = HashMap::new();
        let mut asked = Vec::new();
        let current_partitioner = partitioner();
        loop {
            let facts = RestoreFacts {
                checkpoints,
                folders: &folders,
                blobs: &blobs,
                pipeline: current,
                keyed: Some("agg"),
                partitioner: &current_partitioner,
                options: RestoreOptions::default(),
            };
            match plan_restore(facts)? {
                Decision::VerifyBlobs(id) => {
                    assert!(!asked.contains(&id.0), "asked twice for {id}");
                    asked.push(id.0);
                    blobs.insert(id, check(id));
                }
                Decision::Plan(plan) => return Ok((asked, plan)),
            }
        }
    }

    fn ids(handles: &[CommitHandle]) -> Vec<u64> {
        handles.iter().map(|h| h.checkpoint.0).collect()
    }

    #[test]
    fn decisions() {
        let whole = |_| BlobCheck::Whole;
        let corrupt_above = |n: u64| {
            move |id: CheckpointId| {
                if id.0 > n {
                    BlobCheck::Unusable(format!("blob of {id} corrupt"))
                } else {
                    BlobCheck::Whole
                }
            }
        };
        // (name, checkpoints, blob check, verified, start, reverted, committed)
        type Check = Box<dyn Fn(CheckpointId) -> BlobCheck>;
        type Case<'a> = (
            &'a str,
            Vec<ObservedCheckpoint>,
            Check,
            &'a [u64],
            Start,
            &'a [u64],
            &'a [u64],
        );
        let cases: Vec<Case> = vec![
            (
                "fresh",
                vec![],
                Box::new(whole),
                &[],
                Start::Fresh,
                &[],
                &[],
            ),
            (
                "resume the newest",
                vec![periodic(1), periodic(3), periodic(2)],
                Box::new(whole),
                &[3],
                Start::Resume(CheckpointId(3)),
                &[],
                &[3],
            ),
            (
                "already complete: re-commit, verify nothing",
                vec![periodic(1), manifest(2, CheckpointKind::Final)],
                Box::new(whole),
                &[],
                Start::AlreadyComplete(CheckpointId(2)),
                &[],
                &[2],
            ),
            (
                "fall back past corrupt blobs, reverting what they committed",
                vec![periodic(1), periodic(2), periodic(3)],
                Box::new(corrupt_above(1)),
                &[3, 2, 1],
                Start::Resume(CheckpointId(1)),
                &[3, 2],
                &[1],
            ),
            (
                "nothing usable: start fresh, revert everything",
                vec![periodic(1), periodic(2)],
                Box::new(corrupt_above(0)),
                &[2, 1],
                Start::Fresh,
                &[2, 1],
                &[],
            ),
            (
                "a savepoint resumes like a periodic checkpoint",
                vec![periodic(1), manifest(2, CheckpointKind::Savepoint)],
                Box::new(whole),
                &[2],
                Start::Resume(CheckpointId(2)),
                &[],
                &[2],
            ),
        ];
        for (name, checkpoints, check, asked, start, reverted, committed) in cases {
            let (got_asked, plan) = run(&checkpoints, &pipeline(), check).unwrap();
            assert_eq!(got_asked, asked, "{name}: verified");
            assert_eq!(plan.start, start, "{name}: start");
            assert_eq!(ids(&plan.revert), reverted, "{name}: reverted");
            assert_eq!(ids(&plan.commit), committed, "{name}: committed");
            assert_eq!(plan.fallbacks.len(), reverted.len(), "{name}: fallbacks");
            let newest = checkpoints.iter().map(|c| c.id().0).max().unwrap_or(0);
            assert_eq!(plan.next_id, CheckpointId(newest + 1), "{name}: next id");
        }
    }

    #[test]
    fn the_next_id_is_past_incomplete_folders_too() {
        let checkpoints = [periodic(4)];
        let folders = [CheckpointId(4), CheckpointId(5)];
        let blobs = HashMap::from([(CheckpointId(4), BlobCheck::Whole)]);
        let p = partitioner();
        let facts = RestoreFacts {
            checkpoints: &checkpoints,
            folders: &folders,
            blobs: &blobs,
            pipeline: &pipeline(),
            keyed: None,
            partitioner: &p,
            options: RestoreOptions::default(),
        };
        let Decision::Plan(plan) = plan_restore(facts).unwrap() else {
            panic!("expected a plan")
        };
        assert_eq!(plan.next_id, CheckpointId(6));
    }

    #[test]
    fn refusals() {
        // An unreadable manifest: no guessing which output it committed.
        let unreadable = [
            periodic(1),
            ObservedCheckpoint::Unreadable {
                id: CheckpointId(2),
                reason: "expected value at line 1".into(),
            },
        ];
        let err = run(&unreadable, &pipeline(), |_| BlobCheck::Whole).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("chk-00000000000000000002 aside"),
            "{message}"
        );
        // An older unreadable manifest does not matter when a newer one is usable.
        let older_unreadable = [
            ObservedCheckpoint::Unreadable {
                id: CheckpointId(1),
                reason: "truncated".into(),
            },
            periodic(2),
        ];
        assert!(run(&older_unreadable, &pipeline(), |_| BlobCheck::Whole).is_ok());
        // A changed pipeline is refused before any blob is read.
        let mut changed = pipeline();
        changed[1].kind = "dedup".into();
        let err = run(&[periodic(1)], &changed, |_| panic!("read blobs")).unwrap_err();
        assert!(
            matches!(err, Error::IncompatibleState { ref uid, .. } if uid == "agg"),
            "{err}"
        );
        // Keyed state under another partitioner, likewise.
        let ObservedCheckpoint::Manifest(mut old) = periodic(1) else {
            unreachable!()
        };
        old.partitioner = None;
        let err = run(&[ObservedCheckpoint::Manifest(old)], &pipeline(), |_| {
            panic!("read blobs")
        })
        .unwrap_err();
        assert!(
            matches!(err, Error::IncompatiblePartitioner { .. }),
            "{err}"
        );
    }
}
