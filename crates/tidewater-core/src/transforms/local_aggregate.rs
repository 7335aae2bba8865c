//! The first half of a two-phase aggregation: each upstream subtask
//! aggregates its own rows before the shuffle, so a key crosses the shuffle
//! once per checkpoint interval instead of once per row (the "combiner" of
//! MapReduce, the partial aggregation of DuckDB's and DataFusion's parallel
//! GROUP BY).
//!
//! Before each checkpoint barrier it hands its partials on to the merging
//! aggregate, so the barrier finds nothing here and a checkpoint holds each
//! key once, in the merging aggregate's state (snapshotting the partials
//! here as well doubled the checkpoint bytes at 1M keys). The groups stay
//! in the table, back at their accumulators' identities: the same keys
//! tend to come again, and finding them in place costs less than adding
//! them anew. Only groups that changed since the last hand-on go on (a
//! group still at its identities would add nothing downstream, where it
//! already exists), in pieces of [`HAND_ON_ROWS`] that the channels
//! backpressure one at a time. When the shuffle after it partitions by its
//! keys, it works out each group's downstream subtask once, when the group
//! first goes on, and each piece goes to one subtask whole: a hand-on then
//! neither hashes its partials nor copies them apart into fresh memory for
//! the shuffle. Such pieces carry the groups' numbers here, so that the
//! merge finds its own group for each without looking the key up again
//! (see [`sender_groups`](super::sender_groups)). Before its first hand-on
//! at a barrier it numbers its groups anew in key group order, so that the
//! merge's table fills, and is later updated, in that order too (see
//! [`key_group_order`](super::key_group_order)).
//!
//! It also hands its partials on when its table is full and at the end of
//! input. Where pre-aggregating does not pay (the table filled with fewer
//! than [`MIN_ROWS_PER_GROUP`] rows per key), it passes rows on, reshaped as
//! one-row partials, and holds nothing. Partials restored from a checkpoint
//! that an earlier version wrote with them are handed on first.

use std::sync::Arc;

use arrow::array::RecordBatch;

use super::aggregate::{AggregateOperator, AggregateSpec};
use super::hand_on::{FindChanged, HandOn, Owners};
use super::sender_groups::Tagger;
use crate::error::Result;
use crate::operator::{Collector, Operator};
use crate::partition::KeyRouting;

/// Groups held before the partials go on: 1Mi groups of an Int64 key and
/// three aggregates take ~45 MiB per subtask (key, slot and a 32-byte
/// accumulator row each). More keys than this per upstream subtask, seen
/// with few repeats, make the pre-aggregation pass rows on.
const MAX_GROUPS: usize = 1 << 20;

/// Memory held before the partials go on, whatever the number of groups:
/// wide keys (strings, several columns) reach it before [`MAX_GROUPS`].
const MAX_BYTES: usize = 64 << 20;

/// Rows per group below which a full table shows pre-aggregation does not pay.
const MIN_ROWS_PER_GROUP: f64 = 2.0;

/// Partial groups per batch handed on before a barrier: 32 KiB per 8-byte
/// column, so a table of 1M groups goes on in pieces that the channels
/// hold a few of at a time, not in one copy of the table. Measured at 1M
/// keys, p = 2 and 1 s checkpoints (docs/benchmarks.md, thirty-fourth
/// session): 4096 rows took about 0.5% less CPU than 16384, 65536 about
/// 1.2% more, and 2048 the same as 4096. Why is a guess: a smaller piece
/// (about 150 KB) is still in the caches when the merge reads it.
const HAND_ON_ROWS: usize = 4_096;

/// Groups from which a routed pre-aggregation numbers its groups anew in
/// key group order before its first hand-on (see
/// [`key_group_order`](super::key_group_order)): 2 MiB of accumulator rows
/// at three aggregates, below which the merge's table stays in the cache
/// whatever the order.
const RENUMBER_MIN_GROUPS: usize = 1 << 16;

/// Pre-aggregates `spec` per key ahead of a shuffle (see the module docs).
pub(crate) struct LocalAggregateOperator {
    groups: AggregateOperator,
    /// Rows aggregated since the table was last emptied (rows before a
    /// restore are not counted).
    rows_since_flush: u64,
    max_groups: usize,
    max_bytes: usize,
    min_rows_per_group: f64,
    /// Set once pre-aggregation stopped paying: rows go on as partials.
    passing_through: bool,
    /// Partial groups restored from a checkpoint, handed on before the
    /// first batch. They are not aggregated into the table: after a rescale
    /// one subtask may restore the same key from several old subtasks.
    restored: Option<RecordBatch>,
    /// The group count at the last hand-on: groups from it on are new.
    handed_groups: usize,
    /// Per aggregate, the groups that had no value in it at the last
    /// hand-on: one that gets a value must go on even if it is an identity.
    unseen_then: Vec<Vec<u32>>,
    /// Of those, the groups with a value now, found when a hand-on starts.
    first_values: Vec<u32>,
    /// The hand-on under way.
    hand_on: HandOn,
    /// The downstream subtask of each group, in group order, when the
    /// edge after this operator routes by its keys: worked out once per
    /// group, so a hand-on neither hashes nor splits its partials.
    owners: Vec<u16>,
    /// Groups below this number were numbered in key group order, so their
    /// subtasks in `owners` never decrease: a hand-on finds each subtask's
    /// run of them without sorting. Later groups take the next numbers
    /// whatever their subtask.
    ordered_groups: u32,
    hashes: Vec<u64>,
    /// Tags routed pieces with their group numbers, for the merge.
    tagger: Tagger,
    /// Everything went on before the barrier: nothing to snapshot.
    handed_on: bool,
    /// Groups per piece of a hand-on ([`HAND_ON_ROWS`]).
    piece_rows: usize,
    /// Groups from which the first hand-on renumbers ([`RENUMBER_MIN_GROUPS`]).
    renumber_min_groups: usize,
}

impl LocalAggregateOperator {
    /// Pre-aggregates `spec` grouped by `keys`.
    pub(crate) fn new(keys: Vec<String>, spec: Arc<AggregateSpec>) -> Result<Self> {
        Self::with_max_groups(keys, spec, MAX_GROUPS)
    }

    /// Passes rows on as partials from the first batch on, for a consumer
    /// in the same task (one subtask on each side of the shuffle).
    pub(crate) fn passing_on(keys: Vec<String>, spec: Arc<AggregateSpec>) -> Result<Self> {
        let mut operator = Self::with_max_groups(keys, spec, 0)?;
        operator.min_rows_per_group = f64::INFINITY;
        Ok(operator)
    }

    fn with_max_groups(
        keys: Vec<String>,
        spec: Arc<AggregateSpec>,
        max_groups: usize,
    ) -> Result<Self> {
        Ok(LocalAggregateOperator {
            groups: AggregateOperator::new(keys, spec)?,
            rows_since_flush: 0,
            max_groups,
            max_bytes: MAX_BYTES,
            min_rows_per_group: MIN_ROWS_PER_GROUP,
            passing_through: false,
            restored: None,
            handed_groups: 0,
            unseen_then: Vec::new(),
            first_values: Vec::new(),
            hand_on: HandOn::default(),
            owners: Vec::new(),
            ordered_groups: 0,
            hashes: Vec::new(),
            tagger: Tagger::default(),
            handed_on: false,
            piece_rows: HAND_ON_ROWS,
            renumber_min_groups: RENUMBER_MIN_GROUPS,
        })
    }

    /// Hands on the next piece of the changed groups; `true` while more
    /// remain. `at_barrier`: more hand-ons of the same groups will follow
    /// (a flush empties the table after its hand-on).
    fn hand_on_piece(&mut self, out: &mut Collector, at_barrier: bool) -> Result<bool> {
        if !self.hand_on.under_way() {
            let subtasks = match out.routing() {
                Some(routing)
                    if routing.groups.parallelism() > 1
                        && self.route_groups(routing, at_barrier)? =>
                {
                    Some(routing.groups.parallelism())
                }
                _ => None,
            };
            self.first_values = self.groups.first_values_since(&self.unseen_then);
            let count = self.groups.group_count() as u32;
            self.hand_on.start(
                count,
                subtasks.map(|subtasks| Owners {
                    of: &self.owners,
                    subtasks,
                    ordered_below: self.ordered_groups,
                }),
                finder(&self.groups, self.handed_groups, &self.first_values),
            );
        }
        let find = finder(&self.groups, self.handed_groups, &self.first_values);
        if let Some((piece, routed_to)) = self.hand_on.next_piece(self.piece_rows, find)
            && let Some(batch) = self.groups.take_partials(piece)?
        {
            match routed_to {
                Some(subtask) => out.emit_to(self.tagger.tag(batch, piece)?, subtask),
                None => out.emit(batch),
            }
        }
        if self.hand_on.under_way() {
            return Ok(true);
        }
        self.handed_groups = self.groups.group_count();
        self.unseen_then = self.groups.unseen_groups();
        Ok(false)
    }

    /// Works out each group's downstream subtask under `routing`, first
    /// numbering the groups in key group order if none went on under their
    /// present numbers, more hand-ons of them will follow (`at_barrier`)
    /// and there are enough of them to be worth it; `false` when `routing`
    /// does not partition by this operator's keys.
    ///
    /// A last hand-on (end of input, a full table) does not renumber: the
    /// order would pay off once only, for the cost of a copy of the table.
    fn route_groups(&mut self, routing: &KeyRouting, at_barrier: bool) -> Result<bool> {
        if at_barrier
            && self.handed_groups == 0
            && self.groups.group_count() >= self.renumber_min_groups
        {
            let routed =
                self.groups
                    .renumber_by_key_group(routing, &mut self.owners, &mut self.hashes)?;
            // Each subtask owns a contiguous range of key groups, so in key
            // group order the subtasks never decrease. Checked once all the
            // same: runs found on a wrong premise would send groups astray.
            self.ordered_groups = if routed && self.owners.is_sorted() {
                self.owners.len() as u32
            } else {
                0
            };
            return Ok(routed);
        }
        self.groups
            .owners_of_groups(routing, &mut self.owners, &mut self.hashes)
    }

    /// Hands on every changed group and empties the table.
    fn flush(&mut self, out: &mut Collector) -> Result<()> {
        while self.hand_on_piece(out, false)? {}
        self.rows_since_flush = 0;
        self.handed_groups = 0;
        self.unseen_then.clear();
        self.owners.clear();
        self.ordered_groups = 0;
        self.groups.clear();
        self.tagger.start_over();
        Ok(())
    }
}

/// Finds the groups of a range that a hand-on takes: changed since the
/// last one, when the group count was `handed_groups`.
fn finder<'a>(
    groups: &'a AggregateOperator,
    handed_groups: usize,
    first_values: &'a [u32],
) -> impl FindChanged + 'a {
    move |range, max, into: &mut Vec<u32>| {
        groups.changed_groups(range, handed_groups, first_values, max, into)
    }
}

impl Operator for LocalAggregateOperator {
    fn kind(&self) -> &str {
        "aggregate-local"
    }

    fn process(&mut self, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        self.handed_on = false;
        if let Some(partials) = self.restored.take() {
            out.emit(partials);
        }
        if self.passing_through {
            out.emit(self.groups.partial_rows(&batch)?);
            return Ok(());
        }
        self.rows_since_flush += batch.num_rows() as u64;
        self.groups.process(batch, out)?;
        let groups = self.groups.group_count();
        if groups >= self.max_groups || self.groups.approx_bytes() >= self.max_bytes {
            let rows_per_group = self.rows_since_flush as f64 / groups as f64;
            if rows_per_group < self.min_rows_per_group {
                crate::events::InternalEvent::emit(crate::events::PreAggregationPassesRowsOn {
                    groups,
                    rows: self.rows_since_flush,
                });
                self.passing_through = true;
            }
            self.flush(out)?;
        }
        Ok(())
    }

    fn state_version(&self) -> Option<u32> {
        Some(1)
    }

    fn before_barrier(&mut self, out: &mut Collector) -> Result<bool> {
        if let Some(partials) = self.restored.take() {
            out.emit(partials);
        }
        // The last hand-on, before the end of input, is not followed by more.
        let more = self.hand_on_piece(out, !out.is_ending())?;
        self.handed_on = !more;
        Ok(more)
    }

    /// Nothing once the partials went on before the barrier (as they do in
    /// a running job); otherwise the partials not handed on yet.
    fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        if self.handed_on {
            return Ok(None);
        }
        // Not handed on yet, so no batch came since the restore: the table
        // is empty, and the restored partials are all there is.
        if let Some(partials) = &self.restored {
            return Ok(Some(partials.clone()));
        }
        // Passing rows on, it holds no groups: nothing to write.
        if self.groups.group_count() == 0 {
            return Ok(None);
        }
        self.groups.snapshot()
    }

    /// Partial groups, one row each: split by key group on a rescale like
    /// any keyed state (where they land does not matter, as long as each
    /// lands once: the merge downstream combines them).
    fn state_keys(&self) -> Option<Vec<String>> {
        self.groups.state_keys()
    }

    fn restore(&mut self, state: RecordBatch) -> Result<()> {
        // Restored before any batch: the partials go on with the first
        // batch, before the first barrier, or at the end; the merge
        // downstream combines them with whatever else holds the same keys.
        self.rows_since_flush = 0;
        self.restored = Some(state);
        Ok(())
    }

    fn finish(&mut self, out: &mut Collector) -> Result<()> {
        if let Some(partials) = self.restored.take() {
            out.emit(partials);
        }
        self.flush(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, StringArray};
    use arrow::datatypes::{Float64Type, Int64Type};
    use std::collections::BTreeMap;

    /// count, count of v, sum of v, min and max of id.
    type Group = (i64, i64, Option<f64>, Option<i64>, Option<i64>);

    fn spec() -> Arc<AggregateSpec> {
        Arc::new(
            AggregateSpec::new()
                .count("n")
                .count_values("v", "n_v")
                .sum("v", "sum_v")
                .min("id", "min_id")
                .max("id", "max_id"),
        )
    }

    /// Rows with nulls in `v`, keys from a small and a wide range.
    fn input(batch: u64, rows: u64, keys: u64) -> RecordBatch {
        let mix = |i: u64| crate::splitmix64(batch * 1_000_003 + i);
        let ids: Vec<i64> = (0..rows).map(|i| (batch * rows + i) as i64).collect();
        let k: Vec<i64> = (0..rows).map(|i| (mix(i) % keys) as i64).collect();
        let v: Vec<Option<f64>> = (0..rows)
            .map(|i| (mix(i) % 7 != 0).then_some((mix(i) % 1000) as f64 / 4.0))
            .collect();
        let s: Vec<String> = (0..rows).map(|i| format!("s{i}")).collect();
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
            ("v", Arc::new(Float64Array::from(v)) as ArrayRef),
            ("s", Arc::new(StringArray::from(s)) as ArrayRef),
        ])
        .unwrap()
    }

    fn groups(batches: &[RecordBatch]) -> BTreeMap<i64, Group> {
        let mut out = BTreeMap::new();
        for b in batches {
            let col = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
            let (k, n, n_v, min, max) = (col(0), col(1), col(2), col(4), col(5));
            let sum = b.column(3).as_primitive::<Float64Type>();
            for r in 0..b.num_rows() {
                let group = (
                    n.value(r),
                    n_v.value(r),
                    sum.is_valid(r).then(|| sum.value(r)),
                    min.is_valid(r).then(|| min.value(r)),
                    max.is_valid(r).then(|| max.value(r)),
                );
                assert!(
                    out.insert(k.value(r), group).is_none(),
                    "key {} emitted twice",
                    k.value(r)
                );
            }
        }
        out
    }

    /// Runs batches through local aggregates and one merging aggregate;
    /// every `checkpoint_every` batches all three snapshot their state and are
    /// replaced by fresh operators restored from it, as after a crash.
    /// Returns the merged output.
    ///
    /// `routed`: the locals route their pieces as ahead of a shuffle by `k`
    /// (tagged with their group numbers); the one merge takes them all.
    fn two_phase(
        batches: &[RecordBatch],
        max_groups: usize,
        checkpoint_every: usize,
        routed: bool,
    ) -> Vec<RecordBatch> {
        use crate::partition::{KeyGroups, KeyRouting};
        let routing = routed.then(|| {
            Arc::new(KeyRouting {
                columns: vec!["k".into()],
                groups: KeyGroups::new(64, 3).unwrap(),
            })
        });
        let collector = || Collector::routed_by(routing.clone());
        let take = |partials: &mut Collector| -> Vec<RecordBatch> {
            partials.take_routed().into_iter().map(|(b, _)| b).collect()
        };
        let local = || {
            let mut local =
                LocalAggregateOperator::with_max_groups(vec!["k".into()], spec(), max_groups)
                    .unwrap();
            local.piece_rows = 100; // hand-ons in several pieces
            local.renumber_min_groups = 0; // routed, the first hand-on renumbers
            local
        };
        let merging = || AggregateOperator::merging(vec!["k".into()], spec()).unwrap();
        let mut locals = [local(), local()];
        let mut merge = merging();
        let mut partials = collector();
        for (i, batch) in batches.iter().enumerate() {
            locals[i % 2].process(batch.clone(), &mut partials).unwrap();
            for partial in take(&mut partials) {
                merge.process(partial, &mut Collector::default()).unwrap();
            }
            if (i + 1) % checkpoint_every == 0 {
                for old in &mut locals {
                    while old.before_barrier(&mut partials).unwrap() {}
                }
                for partial in take(&mut partials) {
                    merge.process(partial, &mut Collector::default()).unwrap();
                }
                // Every other checkpoint the operators go on as they are,
                // as after a checkpoint without a crash.
                if (i + 1) % (2 * checkpoint_every) != 0 {
                    for op in &mut locals {
                        assert!(op.snapshot().unwrap().is_none(), "all handed on");
                    }
                    continue;
                }
                for old in &mut locals {
                    let mut restored = local();
                    if let Some(state) = old.snapshot().unwrap() {
                        restored.restore(state).unwrap();
                    }
                    *old = restored;
                }
                let mut restored = merging();
                if let Some(state) = merge.snapshot().unwrap() {
                    restored.restore(state).unwrap();
                }
                merge = restored;
            }
        }
        for local in &mut locals {
            local.finish(&mut partials).unwrap();
        }
        for partial in take(&mut partials) {
            merge.process(partial, &mut Collector::default()).unwrap();
        }
        let mut out = Collector::default();
        merge.finish(&mut out).unwrap();
        out.take()
    }

    /// What one merging aggregate outputs for `partials`.
    fn merged(partials: impl IntoIterator<Item = RecordBatch>) -> Vec<RecordBatch> {
        let mut merge = AggregateOperator::merging(vec!["k".into()], spec()).unwrap();
        for partial in partials {
            merge.process(partial, &mut Collector::default()).unwrap();
        }
        let mut out = Collector::default();
        merge.finish(&mut out).unwrap();
        out.take()
    }

    fn one_phase(batches: &[RecordBatch]) -> Vec<RecordBatch> {
        let mut whole = AggregateOperator::new(vec!["k".into()], spec()).unwrap();
        for batch in batches {
            whole
                .process(batch.clone(), &mut Collector::default())
                .unwrap();
        }
        let mut out = Collector::default();
        whole.finish(&mut out).unwrap();
        out.take()
    }

    #[test]
    fn two_phases_give_what_one_gives_across_restores_whether_pre_aggregating_or_passing_rows_on() {
        // Quarters keep every float sum exact, whatever the order of additions.
        for (keys, max_groups, checkpoint_every) in [
            (50, 1 << 18, 3),    // few keys: pre-aggregates, restored from snapshots
            (50, 1 << 18, 1000), // no checkpoint: handed on at the end only
            (5_000, 1 << 18, 2), // more keys than rows between checkpoints
            (100_000, 64, 4),    // the cap trips with 1 row per group: passes rows on
            (40, 32, 5),         // the cap trips with many rows per group: keeps going
        ] {
            let batches: Vec<RecordBatch> = (0..24).map(|b| input(b, 500, keys)).collect();
            let expected = groups(&one_phase(&batches));
            for routed in [false, true] {
                let got = groups(&two_phase(&batches, max_groups, checkpoint_every, routed));
                assert_eq!(
                    got, expected,
                    "keys {keys}, cap {max_groups}, checkpoint every {checkpoint_every}, \
                     routed {routed}"
                );
                assert_eq!(
                    got.values().map(|g| g.0).sum::<i64>(),
                    24 * 500,
                    "every row counted once"
                );
            }
        }
    }

    /// Asserts that every piece is routed, at most 100 rows, and holds
    /// only rows that `routing` sends to the subtask it went to.
    fn assert_each_piece_goes_whole(
        pieces: &[(RecordBatch, Option<usize>)],
        routing: &KeyRouting,
        key: &str,
    ) {
        for (piece, routed_to) in pieces {
            let to = routed_to.expect("every piece is routed");
            assert!(piece.num_rows() <= 100, "pieces keep their size");
            let parts =
                crate::partition::partition_batch(piece, &[0], &routing.groups, &mut Vec::new())
                    .unwrap();
            for (subtask, part) in parts.iter().enumerate() {
                assert_eq!(
                    part.as_ref().map(RecordBatch::num_rows),
                    (subtask == to).then(|| piece.num_rows()),
                    "key {key}: a piece routed to {to} has rows for subtask {subtask}"
                );
            }
        }
    }

    #[test]
    fn routed_pieces_go_whole_where_the_edge_would_send_their_rows() {
        use crate::partition::{KeyGroups, KeyRouting};
        let batches: Vec<RecordBatch> = (0..6).map(|b| input(b, 500, 2_000)).collect();
        for (key, renumber_min_groups) in [("k", 0), ("s", 0), ("k", usize::MAX)] {
            let routing = KeyRouting {
                columns: vec![key.into()],
                groups: KeyGroups::new(64, 3).unwrap(),
            };
            let mut local = LocalAggregateOperator::new(vec![key.into()], spec()).unwrap();
            local.piece_rows = 100;
            local.renumber_min_groups = renumber_min_groups;
            let mut pieces = Vec::new();
            // New groups arrive with every batch, so each hand-on routes some
            // groups it has not seen before.
            for (i, batch) in batches.iter().enumerate() {
                let mut out = Collector::routed_by(Some(Arc::new(routing.clone())));
                local.process(batch.clone(), &mut out).unwrap();
                if i + 1 == batches.len() {
                    local.finish(&mut out).unwrap();
                } else {
                    while local.before_barrier(&mut out).unwrap() {}
                }
                pieces.extend(out.take_routed());
            }
            assert!(pieces.len() > 3, "several pieces per destination");
            assert_each_piece_goes_whole(&pieces, &routing, key);
            if key == "k" {
                let merged = merged(pieces.into_iter().map(|(piece, _)| piece));
                assert_eq!(groups(&merged), groups(&one_phase(&batches)));
            }
        }
    }

    #[test]
    fn groups_numbered_after_a_full_table_go_where_their_keys_route() {
        use crate::partition::{KeyGroups, KeyRouting};
        let routing = KeyRouting {
            columns: vec!["k".into()],
            groups: KeyGroups::new(64, 3).unwrap(),
        };
        let mut local =
            LocalAggregateOperator::with_max_groups(vec!["k".into()], spec(), 700).unwrap();
        local.piece_rows = 100;
        local.renumber_min_groups = 0;
        local.min_rows_per_group = 0.0; // keep pre-aggregating however few rows a key has
        let batches: Vec<RecordBatch> = (0..8).map(|b| input(b, 500, 2_000)).collect();
        let mut out = Collector::routed_by(Some(Arc::new(routing.clone())));
        // A barrier numbers the groups in key group order; then the table
        // fills and empties several times with no barrier between, so the
        // groups of a later fill are numbered in the order their keys came.
        local.process(batches[0].clone(), &mut out).unwrap();
        while local.before_barrier(&mut out).unwrap() {}
        for batch in &batches[1..] {
            local.process(batch.clone(), &mut out).unwrap();
        }
        local.finish(&mut out).unwrap();
        let pieces = out.take_routed();
        assert_each_piece_goes_whole(&pieces, &routing, "k");
        let merged = merged(pieces.into_iter().map(|(piece, _)| piece));
        assert_eq!(groups(&merged), groups(&one_phase(&batches)));
    }

    #[test]
    fn a_first_hand_on_goes_in_key_group_order_and_later_ones_keep_it() {
        use crate::partition::{KeyGroups, KeyRouting, hash_columns};
        let routing = KeyRouting {
            columns: vec!["k".into()],
            groups: KeyGroups::new(64, 3).unwrap(),
        };
        // The key groups of each routed piece's rows, in the order sent.
        let hand_on = |local: &mut LocalAggregateOperator, batch: RecordBatch, ending: bool| {
            let mut out = Collector::routed_by(Some(Arc::new(routing.clone())));
            local.process(batch, &mut out).unwrap();
            out.set_ending(ending);
            while local.before_barrier(&mut out).unwrap() {}
            let mut sent: Vec<Vec<u32>> = vec![Vec::new(); 3];
            for (piece, to) in out.take_routed() {
                let mut hashes = Vec::new();
                hash_columns(&[piece.column(0)], &mut hashes).unwrap();
                let groups = hashes.iter().map(|h| routing.groups.group_of(*h));
                sent[to.expect("routed")].extend(groups);
            }
            sent
        };
        let ascending = |sent: &[Vec<u32>]| sent.iter().all(|s| s.is_sorted());
        let mut local = LocalAggregateOperator::new(vec!["k".into()], spec()).unwrap();
        local.piece_rows = 100;
        local.renumber_min_groups = 0;
        let first = hand_on(&mut local, input(0, 2_000, 1_000), false);
        assert!(ascending(&first), "the first hand-on in key group order");
        assert!(first.iter().map(Vec::len).sum::<usize>() > 500);
        // The same keys again: the same order, without renumbering again.
        let again = hand_on(&mut local, input(0, 2_000, 1_000), false);
        assert!(ascending(&again), "a later hand-on keeps the order");
        // Without renumbering, the order is the keys' first-seen order: too
        // few groups, or a last hand-on before the end of input.
        for (min_groups, ending) in [(usize::MAX, false), (0, true)] {
            let mut unordered = LocalAggregateOperator::new(vec!["k".into()], spec()).unwrap();
            unordered.renumber_min_groups = min_groups;
            let sent = hand_on(&mut unordered, input(0, 2_000, 1_000), ending);
            assert!(
                !ascending(&sent),
                "min groups {min_groups}, ending {ending}"
            );
        }
    }

    #[test]
    fn pieces_go_unrouted_when_the_edge_keys_by_other_columns() {
        use crate::partition::{KeyGroups, KeyRouting};
        let routing = KeyRouting {
            columns: vec!["id".into()],
            groups: KeyGroups::new(64, 3).unwrap(),
        };
        let mut local = LocalAggregateOperator::new(vec!["k".into()], spec()).unwrap();
        let mut out = Collector::routed_by(Some(Arc::new(routing)));
        local.process(input(0, 500, 50), &mut out).unwrap();
        while local.before_barrier(&mut out).unwrap() {}
        let pieces = out.take_routed();
        assert!(!pieces.is_empty());
        assert!(pieces.iter().all(|(_, to)| to.is_none()));
    }

    #[test]
    fn merged_output_has_the_one_phase_schema() {
        let batches: Vec<RecordBatch> = (0..4).map(|b| input(b, 100, 10)).collect();
        assert_eq!(
            two_phase(&batches, 1 << 18, 2, true)[0].schema(),
            one_phase(&batches)[0].schema()
        );
    }

    #[test]
    fn restored_groups_are_handed_on_by_an_operator_that_passes_rows_on() {
        let batches = [input(0, 500, 50), input(1, 500, 50)];
        let mut before = LocalAggregateOperator::new(vec!["k".into()], spec()).unwrap();
        let mut partials = Collector::default();
        before.process(batches[0].clone(), &mut partials).unwrap();
        assert!(
            partials.take().is_empty(),
            "pre-aggregating, nothing handed on"
        );
        let state = before.snapshot().unwrap().expect("50 groups held");

        let mut after = LocalAggregateOperator::passing_on(vec!["k".into()], spec()).unwrap();
        after.restore(state).unwrap();
        after.process(batches[1].clone(), &mut partials).unwrap();
        after.finish(&mut partials).unwrap();
        assert_eq!(
            groups(&merged(partials.take())),
            groups(&one_phase(&batches))
        );
    }

    #[test]
    fn passing_through_starts_only_when_pre_aggregation_does_not_pay() {
        let mut wide =
            LocalAggregateOperator::with_max_groups(vec!["k".into()], spec(), 64).unwrap();
        let mut out = Collector::default();
        wide.process(input(0, 500, 1_000_000), &mut out).unwrap();
        assert!(wide.passing_through);
        let mut narrow =
            LocalAggregateOperator::with_max_groups(vec!["k".into()], spec(), 64).unwrap();
        narrow.process(input(0, 500, 64), &mut out).unwrap();
        assert!(!narrow.passing_through);
        // Wide keys fill the memory budget before the group cap.
        let mut strings = LocalAggregateOperator::new(vec!["s".into()], spec()).unwrap();
        strings.process(input(0, 500, 64), &mut out).unwrap();
        assert!(
            !strings.passing_through,
            "500 string keys: far below 64 MiB"
        );
        let mut strings = LocalAggregateOperator::new(vec!["s".into()], spec()).unwrap();
        strings.max_bytes = 4096;
        strings.process(input(0, 500, 64), &mut out).unwrap();
        assert!(
            strings.passing_through,
            "500 string keys of one row each fill 4 KiB"
        );
        let mut chained = LocalAggregateOperator::passing_on(vec!["k".into()], spec()).unwrap();
        chained.process(input(0, 500, 64), &mut out).unwrap();
        assert!(chained.passing_through);
    }

    #[test]
    fn only_changed_groups_go_on_and_a_first_value_goes_on_even_at_the_identity() {
        let spec = || Arc::new(AggregateSpec::new().sum("v", "sum_v"));
        let batch = |k: Vec<i64>, v: Vec<Option<f64>>| {
            RecordBatch::try_from_iter([
                ("k", Arc::new(Int64Array::from(k)) as ArrayRef),
                ("v", Arc::new(Float64Array::from(v)) as ArrayRef),
            ])
            .unwrap()
        };
        let batches = [
            batch(vec![1, 2, 3], vec![None, Some(5.0), Some(2.0)]),
            // Key 1's first value is 0.0: its sum stays at the identity.
            batch(vec![1], vec![Some(0.0)]),
            batch(vec![2, 2], vec![Some(1.0), None]),
            batch(vec![], vec![]),
        ];
        let mut local = LocalAggregateOperator::new(vec!["k".into()], spec()).unwrap();
        let mut merge = AggregateOperator::merging(vec!["k".into()], spec()).unwrap();
        let mut handed_on = Vec::new();
        for batch in batches {
            let mut partials = Collector::default();
            local.process(batch, &mut partials).unwrap();
            while local.before_barrier(&mut partials).unwrap() {}
            assert!(local.snapshot().unwrap().is_none(), "all handed on");
            let partials = partials.take();
            handed_on.push(partials.iter().map(|p| p.num_rows()).sum::<usize>());
            for partial in partials {
                merge.process(partial, &mut Collector::default()).unwrap();
            }
        }
        assert_eq!(handed_on, vec![3, 1, 1, 0], "groups handed on per barrier");
        let mut out = Collector::default();
        merge.finish(&mut out).unwrap();
        let mut sums = BTreeMap::new();
        for b in out.take() {
            let (k, sum) = (b.column(0).as_primitive::<Int64Type>(), b.column(1));
            let sum = sum.as_primitive::<Float64Type>();
            for r in 0..b.num_rows() {
                sums.insert(k.value(r), sum.is_valid(r).then(|| sum.value(r)));
            }
        }
        let expected = BTreeMap::from([(1, Some(0.0)), (2, Some(6.0)), (3, Some(2.0))]);
        assert_eq!(sums, expected);
    }
}
