//! Incremental checkpoints, the pure half: when an operator's chain of
//! deltas starts over from a full snapshot, and which blobs a manifest lists.
//!
//! A keyed operator that tracks its changes ([`Operator::track_changes`])
//! writes a full snapshot (a *base*) and then, at each checkpoint, only the
//! rows of keys changed since the one before (a *delta*). A manifest lists,
//! for each operator subtask, its base and the deltas after it in order;
//! each blob names the checkpoint folder it was written in when that is an
//! earlier one. A restore reads the base and applies the deltas (later rows
//! of a key replace earlier ones), and retention keeps every folder a
//! retained checkpoint lists.
//!
//! Chains never span runs: the first checkpoint of every run (and of every
//! restart) is a full one, so a delta's predecessor is always a checkpoint
//! this run completed (a failed checkpoint fails the run).
//!
//! [`Operator::track_changes`]: crate::Operator::track_changes

use std::collections::BTreeSet;

use crate::checkpoint::manifest::BlobRecord;
use crate::error::{Error, Result};
use crate::ids::CheckpointId;

/// [`ChainPolicy::full_every`] unless the job says otherwise. With the
/// rule that a chain also starts over once its deltas hold as many rows as
/// its base, a base every 100 checkpoints keeps the bytes a checkpoint
/// writes, on average, within about twice the changed keys' size when ~1%
/// of the keys change each time (a delta plus a hundredth of the base),
/// while a restore reads at most about twice a full snapshot, in at most
/// 100 blobs per operator subtask.
pub const DEFAULT_FULL_EVERY: u32 = 100;

/// When a chain of deltas starts over from a full snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainPolicy {
    /// A full snapshot at least every this many checkpoints that found
    /// changes (so at most `full_every - 1` deltas follow a base; a
    /// checkpoint that found none writes nothing and does not count).
    pub full_every: u32,
}

impl Default for ChainPolicy {
    fn default() -> Self {
        ChainPolicy {
            full_every: DEFAULT_FULL_EVERY,
        }
    }
}

/// Which snapshot an operator subtask takes at the next checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    /// All of its state: a new base.
    Full,
    /// Only the keys changed since its previous snapshot.
    Changes,
}

/// What one operator subtask wrote since its last full snapshot, this run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainLength {
    /// Rows of the base; `None` before the first full snapshot with state.
    base_rows: Option<usize>,
    /// Deltas since the base.
    deltas: u32,
    /// Their rows, together.
    delta_rows: usize,
}

impl ChainLength {
    /// The snapshot to take next: a full one when there is no base yet,
    /// when the chain reached `full_every`, or when its deltas together
    /// hold as many rows as the base (a restore then reads at most about
    /// twice, plus one delta, what a full snapshot would hold).
    pub fn next(&self, policy: ChainPolicy) -> SnapshotKind {
        match self.base_rows {
            None => SnapshotKind::Full,
            Some(_) if self.deltas + 1 >= policy.full_every => SnapshotKind::Full,
            Some(base) if self.delta_rows >= base.max(1) => SnapshotKind::Full,
            Some(_) => SnapshotKind::Changes,
        }
    }

    /// Records a snapshot taken: `rows` rows, or `None` when a full
    /// snapshot found no state (there is still no base then).
    pub fn taken(&mut self, kind: SnapshotKind, rows: Option<usize>) {
        match kind {
            SnapshotKind::Full => {
                *self = ChainLength {
                    base_rows: rows,
                    ..ChainLength::default()
                }
            }
            // Nothing changed: no delta is written, and a restore reads nothing more.
            SnapshotKind::Changes if rows.unwrap_or(0) == 0 => {}
            SnapshotKind::Changes => {
                self.deltas += 1;
                self.delta_rows += rows.unwrap_or(0);
            }
        }
    }
}

/// The blobs of the previous checkpoint (`previous`, the manifest this run
/// completed last) whose chains go on in this one: those of the operator
/// subtasks in `carried`, base and deltas in order, each marked with the
/// folder it lives in. A task's deltas of this checkpoint follow them.
pub fn carried_blobs(
    previous: Option<(CheckpointId, &[BlobRecord])>,
    carried: &[(String, usize)],
) -> Result<Vec<BlobRecord>> {
    let mut blobs = Vec::new();
    let (id, previous) = previous.unwrap_or((CheckpointId(0), &[]));
    for (uid, subtask) in carried {
        let mut found = false;
        for blob in previous {
            if blob.uid == *uid && blob.subtask == *subtask {
                blobs.push(BlobRecord {
                    written_in: Some(blob.written_in.unwrap_or(id)),
                    ..blob.clone()
                });
                found = true;
            }
        }
        if !found {
            return Err(Error::Internal(format!(
                "operator '{uid}' subtask {subtask} wrote a delta, but the previous checkpoint \
                 lists no state of it to apply the delta to"
            )));
        }
    }
    Ok(blobs)
}

/// The checkpoint folders a manifest's blobs are in, besides its own.
pub fn referenced_folders(blobs: &[BlobRecord]) -> BTreeSet<CheckpointId> {
    blobs.iter().filter_map(|b| b.written_in).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(uid: &str, subtask: usize, written_in: Option<u64>, delta: bool) -> BlobRecord {
        BlobRecord {
            uid: uid.into(),
            subtask,
            path: format!("{uid}/{subtask}.arrow"),
            bytes: 10,
            crc32: 0,
            written_in: written_in.map(CheckpointId),
            delta,
        }
    }

    #[test]
    fn when_a_chain_starts_over() {
        use SnapshotKind::{Changes, Full};
        let policy = ChainPolicy { full_every: 4 };
        // (snapshots taken as (kind, rows), the next kind)
        type Case = (&'static [(SnapshotKind, Option<usize>)], SnapshotKind);
        let cases: &[Case] = &[
            (&[], Full),
            // A full snapshot that found no state is no base.
            (&[(Full, None)], Full),
            (&[(Full, Some(100))], Changes),
            (&[(Full, Some(100)), (Changes, Some(10))], Changes),
            // Three deltas reach full_every 4...
            (
                &[
                    (Full, Some(100)),
                    (Changes, Some(1)),
                    (Changes, Some(1)),
                    (Changes, Some(1)),
                ],
                Full,
            ),
            // ...but checkpoints that found no changes wrote none.
            (
                &[
                    (Full, Some(100)),
                    (Changes, Some(1)),
                    (Changes, None),
                    (Changes, Some(0)),
                    (Changes, Some(1)),
                ],
                Changes,
            ),
            // Deltas as large as the base together: start over.
            (&[(Full, Some(100)), (Changes, Some(60))], Changes),
            (
                &[(Full, Some(100)), (Changes, Some(60)), (Changes, Some(40))],
                Full,
            ),
            (&[(Full, Some(100)), (Changes, Some(100))], Full),
            // A full snapshot resets the chain.
            (
                &[(Full, Some(100)), (Changes, Some(100)), (Full, Some(100))],
                Changes,
            ),
        ];
        for (taken, next) in cases {
            let mut chain = ChainLength::default();
            for (kind, rows) in *taken {
                chain.taken(*kind, *rows);
            }
            assert_eq!(chain.next(policy), *next, "{taken:?}");
        }
        let every_time = ChainPolicy { full_every: 1 };
        let mut chain = ChainLength::default();
        chain.taken(Full, Some(5));
        assert_eq!(chain.next(every_time), Full, "full_every 1: never a delta");
    }

    /// The default: 1% of a base's keys changed each time makes 99 deltas
    /// (the bytes of a checkpoint stay about twice the changed keys' on
    /// average), 10% makes 10, whose rows then match the base's (a restore
    /// reads at most about twice a full snapshot, whatever the count allows).
    #[test]
    fn the_default_chain_is_long_for_few_changes_and_short_for_many() {
        let deltas_before_a_base = |changed: usize| {
            let mut chain = ChainLength::default();
            chain.taken(SnapshotKind::Full, Some(10_000));
            let mut deltas = 0;
            while chain.next(ChainPolicy::default()) == SnapshotKind::Changes {
                chain.taken(SnapshotKind::Changes, Some(changed));
                deltas += 1;
            }
            deltas
        };
        let few = deltas_before_a_base(100);
        assert_eq!(few, DEFAULT_FULL_EVERY - 1);
        assert_eq!(few, 99);
        assert_eq!(deltas_before_a_base(1_000), 10);
    }

    #[test]
    fn carried_chains_keep_their_order_and_say_where_they_live() {
        let previous = [
            blob("agg", 0, None, false),
            blob("agg", 1, Some(3), false),
            blob("agg", 1, Some(4), true),
            blob("agg", 1, None, true),
            blob("src", 0, None, false),
        ];
        let carried =
            carried_blobs(Some((CheckpointId(5), &previous)), &[("agg".into(), 1)]).unwrap();
        assert_eq!(
            carried,
            vec![
                blob("agg", 1, Some(3), false),
                blob("agg", 1, Some(4), true),
                blob("agg", 1, Some(5), true),
            ]
        );
        assert_eq!(
            referenced_folders(&carried),
            [3, 4, 5].map(CheckpointId).into_iter().collect()
        );
        assert!(
            carried_blobs(Some((CheckpointId(5), &previous)), &[])
                .unwrap()
                .is_empty()
        );

        let missing = carried_blobs(Some((CheckpointId(5), &previous)), &[("agg".into(), 2)]);
        assert!(missing.unwrap_err().to_string().contains("subtask 2"));
        assert!(carried_blobs(None, &[("agg".into(), 0)]).is_err());
    }
}
