//! Pure decisions taken on restore: does the checkpoint fit the pipeline, and
//! which checkpoints does retention delete.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::checkpoint::manifest::OperatorRecord;
pub use crate::checkpoint::manifest::Role;
use crate::error::{Error, Result};
use crate::ids::CheckpointId;
use crate::partition::PartitionerId;

/// Which pipeline changes a restore accepts. The defaults refuse every change
/// that would silently lose or misread state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Accept that state of an operator no longer in the pipeline is dropped.
    pub allow_dropped_state: bool,
    /// Accept a new stateful operator, which starts empty although the
    /// sources continue from the checkpoint (it misses the rows before it).
    pub allow_new_state: bool,
}

/// Checks that the operators recorded in a checkpoint fit the pipeline being
/// restored. Returns the notes worth logging, or the first incompatibility.
pub fn check_compatible(
    checkpoint: CheckpointId,
    recorded: &[OperatorRecord],
    current: &[OperatorRecord],
    options: RestoreOptions,
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let current_by_uid: HashMap<&str, &OperatorRecord> =
        current.iter().map(|c| (c.uid.as_str(), c)).collect();
    let recorded_by_uid: HashMap<&str, &OperatorRecord> =
        recorded.iter().map(|r| (r.uid.as_str(), r)).collect();
    let refuse = |uid: &str, detail: String| Error::IncompatibleState {
        uid: uid.to_string(),
        checkpoint,
        detail,
    };

    for old in recorded {
        let Some(new) = current_by_uid.get(old.uid.as_str()) else {
            if old.state_version.is_some() && !options.allow_dropped_state {
                return Err(refuse(
                    &old.uid,
                    format!(
                        "has state (kind '{}') in the checkpoint but is no longer in the pipeline",
                        old.kind
                    ),
                ));
            }
            notes.push(format!(
                "operator '{}' was removed from the pipeline",
                old.uid
            ));
            continue;
        };
        if old.kind != new.kind || old.role != new.role {
            return Err(refuse(
                &old.uid,
                format!(
                    "was {} kind '{}' in the checkpoint and is {} kind '{}' now",
                    role_name(old.role),
                    old.kind,
                    role_name(new.role),
                    new.kind
                ),
            ));
        }
        if old.state_version != new.state_version {
            return Err(refuse(
                &old.uid,
                format!(
                    "its state schema was version {} in the checkpoint and is {} now",
                    version(old.state_version),
                    version(new.state_version)
                ),
            ));
        }
        let keeps_subtask_state = new.role != Role::Source && new.state_version.is_some();
        if keeps_subtask_state && old.parallelism != new.parallelism && !new.rescalable {
            let why = if new.role == Role::Sink {
                "its writers carry unfinished output (open files) in the checkpoint, one per \
                 subtask, and this sink cannot move it: resume with the old parallelism, or \
                 start a new job"
            } else {
                "its state is one piece per subtask, not split by key (the operator's \
                 Operator::state_keys is None): resume with the old parallelism, or make the \
                 state one row per key and return its key columns from state_keys"
            };
            return Err(refuse(
                &old.uid,
                format!(
                    "its state was taken at parallelism {} and the pipeline asks for {} ({why})",
                    old.parallelism, new.parallelism
                ),
            ));
        }
    }

    for new in current {
        if recorded_by_uid.contains_key(new.uid.as_str()) {
            continue;
        }
        let stateful = new.role == Role::Operator && new.state_version.is_some();
        if stateful && !options.allow_new_state {
            return Err(refuse(
                &new.uid,
                format!(
                    "is new (kind '{}') and keeps state: it would start empty while the sources \
                     continue from the checkpoint, missing the rows before it",
                    new.kind
                ),
            ));
        }
        notes.push(format!("operator '{}' is new and starts empty", new.uid));
    }
    Ok(notes)
}

/// Checks that the keyed state of a checkpoint was placed in subtasks by the
/// partitioner this build uses. `keyed` names an operator whose state depends
/// on that placement (one reading a hash-partitioned input), if the pipeline
/// has one. Under another partitioner its restored keys would sit in
/// subtasks that no longer receive them: silently wrong results.
pub fn check_partitioner(
    checkpoint: CheckpointId,
    recorded: Option<&PartitionerId>,
    current: &PartitionerId,
    keyed: Option<&str>,
) -> Result<()> {
    let Some(uid) = keyed else {
        return Ok(());
    };
    if recorded == Some(current) {
        return Ok(());
    }
    Err(Error::IncompatiblePartitioner {
        uid: uid.to_string(),
        checkpoint,
        recorded: recorded.map_or_else(
            || "an older partitioner (foldhash, before partitioners were recorded)".to_string(),
            |p| format!("partitioner {p}"),
        ),
        current: current.to_string(),
    })
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Source => "a source of",
        Role::Operator => "an operator of",
        Role::Sink => "a sink of",
    }
}

/// Checks that a source's splits are those its cursors in the checkpoint
/// point into (`then`, sorted by id; `now`, in the source's order). Cursors
/// of other splits would point into other data.
pub fn check_splits(
    uid: &str,
    checkpoint: CheckpointId,
    then: &[&str],
    now: &[&str],
) -> Result<()> {
    let mut now_sorted = now.to_vec();
    now_sorted.sort_unstable();
    let mut then_sorted = then.to_vec();
    then_sorted.sort_unstable();
    if now_sorted == then_sorted {
        return Ok(());
    }
    let missing = then.iter().find(|id| !now.contains(id));
    let added = now.iter().find(|id| !then.contains(id));
    Err(Error::IncompatibleState {
        uid: uid.to_string(),
        checkpoint,
        detail: format!(
            "the source's splits changed ({} in the checkpoint, {} now; e.g. {} ...): \
             was the source's configuration (rows, keys, files, key range) changed?",
            then.len(),
            now.len(),
            match (missing, added) {
                (Some(m), _) => format!("'{m}' is gone"),
                (None, Some(a)) => format!("'{a}' is new"),
                (None, None) => "a split appears twice".into(),
            }
        ),
    })
}

fn version(v: Option<u32>) -> String {
    v.map_or_else(|| "none (stateless)".to_string(), |v| v.to_string())
}

/// The newest `retain` (at least 1) complete checkpoints: the ones
/// retention keeps, with the folders their manifests list blobs in.
pub fn retained(complete: &[CheckpointId], retain: usize) -> Vec<CheckpointId> {
    let mut sorted = complete.to_vec();
    sorted.sort_unstable();
    let from = sorted.len().saturating_sub(retain.max(1));
    sorted.split_off(from)
}

/// What retention deletes, in order: first the manifests of every complete
/// checkpoint it no longer keeps (`retired`), then the folders no kept
/// checkpoint needs (`victims`).
///
/// The order matters with incremental chains: a kill part way through must
/// never leave a manifest behind whose base or deltas are already gone, and
/// a retired checkpoint may list folders that no kept one needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// Complete checkpoints older than the kept ones, oldest first: their
    /// manifests go (their folders too, unless a kept checkpoint lists them).
    pub retired: Vec<CheckpointId>,
    /// Folders deleted whole, oldest first.
    pub victims: Vec<CheckpointId>,
}

/// What retention deletes: every folder older than the newest `retain`
/// complete checkpoints, except the folders those checkpoints' manifests
/// list blobs in (`references`, by kept checkpoint: the bases and deltas of
/// incremental chains), which lose only their manifests. Folders newer than
/// the oldest kept complete checkpoint are kept (they may be in flight).
pub fn retention(
    complete: &[CheckpointId],
    folders: &[CheckpointId],
    retain: usize,
    references: &BTreeMap<CheckpointId, BTreeSet<CheckpointId>>,
) -> Retention {
    let kept = retained(complete, retain);
    if kept.len() == complete.len() {
        return Retention::default();
    }
    let oldest_kept = kept[0];
    let needed: BTreeSet<CheckpointId> = kept
        .iter()
        .filter_map(|id| references.get(id))
        .flatten()
        .copied()
        .collect();
    let mut retired: Vec<CheckpointId> = complete
        .iter()
        .copied()
        .filter(|id| *id < oldest_kept)
        .collect();
    retired.sort_unstable();
    let mut victims: Vec<CheckpointId> = folders
        .iter()
        .copied()
        .filter(|id| *id < oldest_kept && !needed.contains(id))
        .collect();
    victims.sort_unstable();
    Retention { retired, victims }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(uid: &str, kind: &str, version: Option<u32>, parallelism: usize) -> OperatorRecord {
        let role = match kind {
            "generator" => Role::Source,
            "parquet-sink" | "parquet" => Role::Sink,
            _ => Role::Operator,
        };
        OperatorRecord {
            uid: uid.into(),
            role,
            kind: kind.into(),
            state_version: version,
            parallelism,
            rescalable: false,
        }
    }

    fn rescalable(mut record: OperatorRecord) -> OperatorRecord {
        record.rescalable = true;
        record
    }

    #[test]
    fn compatibility_table() {
        let recorded = vec![
            op("gen", "generator", Some(1), 2),
            op("agg", "aggregate", Some(1), 2),
            op("keep", "filter", None, 2),
            op("out", "parquet-sink", None, 2),
        ];
        let same: Vec<_> = recorded.clone();
        let strict = RestoreOptions::default();
        let id = CheckpointId(3);
        assert!(check_compatible(id, &recorded, &same, strict).is_ok());

        let with = |i: usize, record: OperatorRecord| {
            let mut c = same.clone();
            c[i] = record;
            c
        };
        let refused_uid = |current: &[OperatorRecord], options| match check_compatible(
            id, &recorded, current, options,
        ) {
            Err(Error::IncompatibleState { uid, .. }) => Some(uid),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => None,
        };
        // Sources and stateless sinks may rescale; state per subtask may
        // not; keyed state split by key group and sinks that move their
        // writers' state may.
        assert_eq!(
            refused_uid(&with(0, op("gen", "generator", Some(1), 4)), strict),
            None
        );
        assert_eq!(
            refused_uid(&with(3, op("out", "parquet-sink", None, 1)), strict),
            None
        );
        assert_eq!(
            refused_uid(&with(1, op("agg", "aggregate", Some(1), 3)), strict),
            Some("agg".into())
        );
        let keyed = rescalable(op("agg", "aggregate", Some(1), 3));
        assert_eq!(refused_uid(&with(1, keyed), strict), None);
        let err = check_compatible(
            id,
            &recorded,
            &with(1, op("agg", "aggregate", Some(1), 3)),
            strict,
        )
        .unwrap_err();
        assert!(err.to_string().contains("state_keys"), "{err}");
        // Another kind or state version under the same uid.
        assert_eq!(
            refused_uid(&with(1, op("agg", "dedup", Some(1), 2)), strict),
            Some("agg".into())
        );
        assert_eq!(
            refused_uid(&with(1, op("agg", "aggregate", Some(2), 2)), strict),
            Some("agg".into())
        );
        // A stateless operator can go away; a stateful one only when allowed.
        let without_keep: Vec<_> = same.iter().filter(|c| c.uid != "keep").cloned().collect();
        assert_eq!(refused_uid(&without_keep, strict), None);
        let without_agg: Vec<_> = same.iter().filter(|c| c.uid != "agg").cloned().collect();
        assert_eq!(refused_uid(&without_agg, strict), Some("agg".into()));
        let drop_ok = RestoreOptions {
            allow_dropped_state: true,
            ..strict
        };
        assert_eq!(refused_uid(&without_agg, drop_ok), None);
        // A new stateful operator would miss earlier rows: refused unless allowed.
        let mut added = same.clone();
        added.push(op("dedup", "dedup", Some(1), 2));
        assert_eq!(refused_uid(&added, strict), Some("dedup".into()));
        let new_ok = RestoreOptions {
            allow_new_state: true,
            ..strict
        };
        assert_eq!(refused_uid(&added, new_ok), None);
        let mut added_stateless = same.clone();
        added_stateless.push(op("tag", "map", None, 2));
        assert_eq!(refused_uid(&added_stateless, strict), None);
        // A sink whose writers carry open output keeps its parallelism, and says why.
        let stateful_sink = vec![op("out", "parquet", Some(1), 2)];
        let rescaled = vec![op("out", "parquet", Some(1), 3)];
        let err = check_compatible(id, &stateful_sink, &rescaled, strict).unwrap_err();
        assert!(err.to_string().contains("open files"), "{err}");
        let moving = [rescalable(op("out", "parquet", Some(1), 3))];
        assert!(check_compatible(id, &stateful_sink, &moving, strict).is_ok());
        // The same kind name as a source and as a sink is another operator.
        let mut as_source = op("out", "parquet", Some(1), 2);
        as_source.role = Role::Source;
        let err = check_compatible(id, &stateful_sink, &[as_source], strict).unwrap_err();
        assert!(
            err.to_string().contains("a sink of kind 'parquet'"),
            "{err}"
        );
    }

    #[test]
    fn splits_table() {
        let id = CheckpointId(2);
        // (then, now, refusal names)
        let cases: &[(&[&str], &[&str], Option<&str>)] = &[
            (&["a", "b"], &["a", "b"], None),
            (&["a", "b"], &["b", "a"], None),
            (&["a", "b"], &["a"], Some("'b' is gone")),
            (&["a"], &["a", "c"], Some("'c' is new")),
            (&["a", "b"], &["a", "c"], Some("'b' is gone")),
        ];
        for (then, now, refusal) in cases {
            let result = check_splits("src", id, then, now);
            match (refusal, result) {
                (None, Ok(())) => {}
                (Some(words), Err(e)) => {
                    let message = e.to_string();
                    assert!(message.contains(words), "{message}");
                    assert!(message.contains("'src'"), "{message}");
                }
                (want, got) => panic!("{then:?} -> {now:?}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn partitioner_table() {
        let v1 = PartitionerId {
            name: "xxh3-64".into(),
            version: 1,
        };
        let v2 = PartitionerId {
            version: 2,
            ..v1.clone()
        };
        let id = CheckpointId(7);
        // (recorded, keyed operator, allowed)
        let cases: &[(Option<&PartitionerId>, Option<&str>, bool)] = &[
            (Some(&v1), Some("agg"), true),
            (Some(&v2), Some("agg"), false),
            (None, Some("agg"), false),
            // Without keyed state placement does not matter.
            (Some(&v2), None, true),
            (None, None, true),
        ];
        for (recorded, keyed, allowed) in cases {
            let result = check_partitioner(id, *recorded, &v1, *keyed);
            assert_eq!(result.is_ok(), *allowed, "{recorded:?} {keyed:?}");
            if let Err(e) = result {
                let message = e.to_string();
                assert!(message.contains("'agg'"), "{message}");
                assert!(message.contains("xxh3-64 version 1"), "{message}");
                assert!(message.contains("start it anew"), "{message}");
            }
        }
    }

    #[test]
    fn retention_keeps_the_newest_complete_checkpoints_and_anything_newer() {
        let ids = |v: &[u64]| v.iter().copied().map(CheckpointId).collect::<Vec<_>>();
        // (complete, folders, retain, references, manifests deleted, folders deleted)
        type Case<'a> = (
            &'a [u64],
            &'a [u64],
            usize,
            &'a [(u64, &'a [u64])],
            &'a [u64],
            &'a [u64],
        );
        let cases: &[Case] = &[
            (&[1, 2, 3], &[1, 2, 3], 3, &[], &[], &[]),
            (&[1, 2, 3, 4], &[1, 2, 3, 4, 5], 3, &[], &[1], &[1]),
            // An orphan folder (no manifest) older than the kept ones goes too.
            (
                &[2, 4, 5, 6],
                &[1, 2, 3, 4, 5, 6, 7],
                2,
                &[],
                &[2, 4],
                &[1, 2, 3, 4],
            ),
            (&[5], &[5, 6], 0, &[], &[], &[]),
            // Incremental chains: a kept checkpoint's base and deltas stay,
            // but the checkpoints they were written in are no longer complete.
            (
                &[1, 2, 3, 4, 5, 6],
                &[1, 2, 3, 4, 5, 6],
                2,
                &[(5, &[2, 3, 4]), (6, &[2, 3, 4, 5])],
                &[1, 2, 3, 4],
                &[1],
            ),
            // ...until no kept checkpoint lists them.
            (
                &[2, 3, 4, 5, 6, 7],
                &[2, 3, 4, 5, 6, 7],
                2,
                &[(6, &[4, 5]), (7, &[6])],
                &[2, 3, 4, 5],
                &[2, 3],
            ),
            // A folder with blobs and no manifest any more stays while needed.
            (
                &[5, 6, 7],
                &[3, 4, 5, 6, 7],
                2,
                &[(6, &[3, 5]), (7, &[3, 5, 6])],
                &[5],
                &[4],
            ),
            // References of checkpoints retention does not keep do not count.
            (
                &[1, 2, 3, 4],
                &[1, 2, 3, 4],
                1,
                &[(3, &[1, 2])],
                &[1, 2, 3],
                &[1, 2, 3],
            ),
        ];
        for (complete, folders, retain, references, retired, victims) in cases {
            let references = references
                .iter()
                .map(|(id, refs)| (CheckpointId(*id), ids(refs).into_iter().collect()))
                .collect();
            assert_eq!(
                retention(&ids(complete), &ids(folders), *retain, &references),
                Retention {
                    retired: ids(retired),
                    victims: ids(victims)
                },
                "{complete:?} {folders:?} {retain} {references:?}"
            );
        }
        assert_eq!(retained(&ids(&[3, 1, 2]), 2), ids(&[2, 3]));
    }
}
