//! Pure decisions taken on restore: does the checkpoint fit the pipeline, and
//! which checkpoints does retention delete.

use std::collections::HashMap;

use crate::checkpoint::manifest::OperatorRecord;
use crate::error::{Error, Result};
use crate::ids::CheckpointId;

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

/// What an operator is to the restore check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Cursors are keyed by split, so a source may change parallelism.
    Source,
    /// Keyed or per-subtask state: parallelism must stay.
    Operator,
    /// State is commit handles: parallelism may change.
    Sink,
}

/// Checks that the operators recorded in a checkpoint fit the pipeline being
/// restored. Returns the notes worth logging, or the first incompatibility.
pub fn check_compatible(
    checkpoint: CheckpointId,
    recorded: &[OperatorRecord],
    current: &[(OperatorRecord, Role)],
    options: RestoreOptions,
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let current_by_uid: HashMap<&str, &(OperatorRecord, Role)> =
        current.iter().map(|c| (c.0.uid.as_str(), c)).collect();
    let recorded_by_uid: HashMap<&str, &OperatorRecord> =
        recorded.iter().map(|r| (r.uid.as_str(), r)).collect();
    let refuse = |uid: &str, detail: String| Error::IncompatibleState {
        uid: uid.to_string(),
        checkpoint,
        detail,
    };

    for old in recorded {
        let Some((new, role)) = current_by_uid.get(old.uid.as_str()) else {
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
        if old.kind != new.kind {
            return Err(refuse(
                &old.uid,
                format!(
                    "was kind '{}' in the checkpoint and is kind '{}' now",
                    old.kind, new.kind
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
        let keeps_subtask_state = *role != Role::Source && new.state_version.is_some();
        if keeps_subtask_state && old.parallelism != new.parallelism {
            let why = if *role == Role::Sink {
                "its writers carry unfinished output (open files) in the checkpoint, one per \
                 subtask: resume with the old parallelism, or start a new job"
            } else {
                "rescaling keyed state is not supported yet"
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

    for (new, role) in current {
        if recorded_by_uid.contains_key(new.uid.as_str()) {
            continue;
        }
        let stateful = *role == Role::Operator && new.state_version.is_some();
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

fn version(v: Option<u32>) -> String {
    v.map_or_else(|| "none (stateless)".to_string(), |v| v.to_string())
}

/// The checkpoints retention deletes: every folder older than the newest
/// `retain` complete checkpoints. Folders newer than the oldest retained
/// complete checkpoint are kept (they may be in flight).
pub fn retention_victims(
    complete: &[CheckpointId],
    folders: &[CheckpointId],
    retain: usize,
) -> Vec<CheckpointId> {
    let retain = retain.max(1);
    if complete.len() <= retain {
        return Vec::new();
    }
    let mut sorted = complete.to_vec();
    sorted.sort_unstable();
    let oldest_kept = sorted[sorted.len() - retain];
    folders
        .iter()
        .copied()
        .filter(|id| *id < oldest_kept)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(uid: &str, kind: &str, version: Option<u32>, parallelism: usize) -> OperatorRecord {
        OperatorRecord {
            uid: uid.into(),
            kind: kind.into(),
            state_version: version,
            parallelism,
        }
    }

    #[test]
    fn compatibility_table() {
        let recorded = vec![
            op("gen", "generator", Some(1), 2),
            op("agg", "aggregate", Some(1), 2),
            op("keep", "filter", None, 2),
            op("out", "parquet-sink", None, 2),
        ];
        let same: Vec<_> = vec![
            (op("gen", "generator", Some(1), 2), Role::Source),
            (op("agg", "aggregate", Some(1), 2), Role::Operator),
            (op("keep", "filter", None, 2), Role::Operator),
            (op("out", "parquet-sink", None, 2), Role::Sink),
        ];
        let strict = RestoreOptions::default();
        let id = CheckpointId(3);
        assert!(check_compatible(id, &recorded, &same, strict).is_ok());

        let with = |i: usize, record: OperatorRecord| {
            let mut c = same.clone();
            c[i].0 = record;
            c
        };
        let refused_uid = |current: &[(OperatorRecord, Role)], options| match check_compatible(
            id, &recorded, current, options,
        ) {
            Err(Error::IncompatibleState { uid, .. }) => Some(uid),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => None,
        };
        // Sources and sinks may rescale; keyed state may not.
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
        let without_keep: Vec<_> = same.iter().filter(|c| c.0.uid != "keep").cloned().collect();
        assert_eq!(refused_uid(&without_keep, strict), None);
        let without_agg: Vec<_> = same.iter().filter(|c| c.0.uid != "agg").cloned().collect();
        assert_eq!(refused_uid(&without_agg, strict), Some("agg".into()));
        let drop_ok = RestoreOptions {
            allow_dropped_state: true,
            ..strict
        };
        assert_eq!(refused_uid(&without_agg, drop_ok), None);
        // A new stateful operator would miss earlier rows: refused unless allowed.
        let mut added = same.clone();
        added.push((op("dedup", "dedup", Some(1), 2), Role::Operator));
        assert_eq!(refused_uid(&added, strict), Some("dedup".into()));
        let new_ok = RestoreOptions {
            allow_new_state: true,
            ..strict
        };
        assert_eq!(refused_uid(&added, new_ok), None);
        let mut added_stateless = same.clone();
        added_stateless.push((op("tag", "map", None, 2), Role::Operator));
        assert_eq!(refused_uid(&added_stateless, strict), None);
        // A sink whose writers carry open output keeps its parallelism, and says why.
        let stateful_sink = vec![op("out", "sink:parquet", Some(1), 2)];
        let rescaled = vec![(op("out", "sink:parquet", Some(1), 3), Role::Sink)];
        let err = check_compatible(id, &stateful_sink, &rescaled, strict).unwrap_err();
        assert!(err.to_string().contains("open files"), "{err}");
    }

    #[test]
    fn retention_keeps_the_newest_complete_checkpoints_and_anything_newer() {
        let ids = |v: &[u64]| v.iter().copied().map(CheckpointId).collect::<Vec<_>>();
        // (complete, folders, retain, deleted)
        type Case<'a> = (&'a [u64], &'a [u64], usize, &'a [u64]);
        let cases: &[Case] = &[
            (&[1, 2, 3], &[1, 2, 3], 3, &[]),
            (&[1, 2, 3, 4], &[1, 2, 3, 4, 5], 3, &[1]),
            // An orphan folder (no manifest) older than the kept ones goes too.
            (&[2, 4, 5, 6], &[1, 2, 3, 4, 5, 6, 7], 2, &[1, 2, 3, 4]),
            (&[5], &[5, 6], 0, &[]),
        ];
        for (complete, folders, retain, victims) in cases {
            assert_eq!(
                retention_victims(&ids(complete), &ids(folders), *retain),
                ids(victims),
                "{complete:?} {folders:?} {retain}"
            );
        }
    }
}
