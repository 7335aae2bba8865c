//! The aggregate's per-group values, stored row-wise: a group's accumulators
//! sit side by side in one row of 8-byte words (padded to a power of two, so
//! three aggregates take 32 bytes and a row never straddles a cache line).
//!
//! Updating a group then touches one cache line however many aggregates
//! there are. With one array per aggregate it touched one line per
//! aggregate, and at 1M keys (tables larger than the cache) each of those was
//! a miss: measured on count/sum/max, the row-wise layout is what the
//! hand-written loop in the benchmarks uses.

use std::ops::Range;

use super::prefetch::{LOOKAHEAD, prefetch};

/// Rows copied into columns, or put back to the identities, a block at a
/// time (64 KiB of 4-word rows).
const COPY_BLOCK_ROWS: usize = 2048;

/// A value an accumulator keeps in one 8-byte word.
pub(crate) trait Word: Copy {
    /// The value's bits.
    fn to_word(self) -> u64;
    /// The value from its bits.
    fn from_word(word: u64) -> Self;
}

impl Word for i64 {
    fn to_word(self) -> u64 {
        self as u64
    }
    fn from_word(word: u64) -> Self {
        word as i64
    }
}

impl Word for f64 {
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    fn from_word(word: u64) -> Self {
        f64::from_bits(word)
    }
}

/// Every group's accumulator words; group `g`'s word for accumulator `slot`
/// is `words[(row << shift) | slot]`, where `row` is `g` unless a
/// renumbering is pending (see [`renumber`](AccumulatorTable::renumber)).
pub(crate) struct AccumulatorTable {
    words: Vec<u64>,
    shift: u32,
    /// [`COPY_BLOCK_ROWS`] rows of the words a new group starts with (each
    /// accumulator's identity), so that many rows are set with one copy.
    fresh_rows: Vec<u64>,
    /// A renumbering not applied to the rows yet.
    pending: Option<Pending>,
}

/// A renumbering the rows have not followed yet: group `g`'s row is
/// `order[g]`. Rows read with a reset are marked; once every row has been,
/// all rows hold the identities, in any order, and the renumbering is done
/// without moving a row.
struct Pending {
    order: Vec<u32>,
    /// A bit per row: put back to the identities since the renumbering.
    reset: Vec<u64>,
    reset_count: usize,
}

impl AccumulatorTable {
    /// A table with one slot per entry of `identities`, no groups yet.
    pub fn new(identities: &[u64]) -> Self {
        let width = identities.len().max(1).next_power_of_two();
        let mut fresh_row = identities.to_vec();
        fresh_row.resize(width, 0);
        AccumulatorTable {
            words: Vec::new(),
            shift: width.trailing_zeros(),
            fresh_rows: fresh_row.repeat(COPY_BLOCK_ROWS),
            pending: None,
        }
    }

    /// The words a new group starts with.
    fn fresh_row(&self) -> &[u64] {
        &self.fresh_rows[..1 << self.shift]
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.words.len() >> self.shift
    }

    /// The memory the groups' words take.
    pub fn bytes(&self) -> usize {
        self.words.len() * size_of::<u64>()
    }

    /// Adds fresh groups until there are `groups`.
    pub fn resize(&mut self, groups: usize) {
        let have = self.groups();
        if groups <= have {
            return;
        }
        self.settle();
        self.words.reserve((groups - have) << self.shift);
        for _ in have..groups {
            self.words
                .extend_from_slice(&self.fresh_rows[..1 << self.shift]);
        }
    }

    /// Appends to `into`, in ascending order, the groups of `groups` a
    /// pre-aggregation has to hand on: each from `new_from` on, and each
    /// before it whose row left the accumulators' identities. (An older
    /// group still at its identities adds nothing downstream, where it
    /// already exists.) Stops once it has appended `max`, and returns
    /// where it stopped: the group after the last one appended, or the
    /// range's end (at most the group count) when fewer were found.
    ///
    /// A hand-on asks for a piece's worth at a time, just before it reads
    /// them out (see [`hand_on`](super::hand_on)).
    pub fn changed_rows(
        &self,
        groups: Range<u32>,
        new_from: usize,
        max: usize,
        into: &mut Vec<u32>,
    ) -> u32 {
        let end = groups.end.min(self.groups() as u32);
        let mut group = groups.start.min(end);
        let old_end = new_from.min(end as usize).max(group as usize) as u32;
        let width = 1 << self.shift;
        let fresh = self.fresh_row();
        // Word by word, inlined: a slice comparison calls memcmp per row.
        let changed = |row: &[u64]| !row.iter().zip(fresh).all(|(a, b)| a == b);
        let mut left = max;
        if left == 0 {
            return group;
        }
        // The two loops are written out: one generic helper for both read
        // about 4 ms a checkpoint slower at 1M keys (docs/benchmarks.md,
        // fortieth session).
        match &self.pending {
            None => {
                let words =
                    &self.words[(group as usize) << self.shift..(old_end as usize) << self.shift];
                for row in words.chunks_exact(width) {
                    group += 1;
                    if changed(row) {
                        into.push(group - 1);
                        left -= 1;
                        if left == 0 {
                            return group;
                        }
                    }
                }
            }
            Some(pending) => {
                while group < old_end {
                    group += 1;
                    if changed(self.row(pending.order[group as usize - 1])) {
                        into.push(group - 1);
                        left -= 1;
                        if left == 0 {
                            return group;
                        }
                    }
                }
            }
        }
        let new = (end - group).min(u32::try_from(left).unwrap_or(u32::MAX));
        into.extend(group..group + new);
        group + new
    }

    /// The words and the row shift, for the update loops.
    pub fn cells(&mut self) -> (&mut [u64], u32) {
        self.settle();
        (&mut self.words, self.shift)
    }

    /// Appends accumulator `slot` of every group, in group order, to
    /// `columns[slot]`, in one pass over the table.
    pub fn columns_into(&self, columns: &mut [Vec<u64>]) {
        let groups = self.groups();
        for column in columns.iter_mut() {
            column.reserve(groups);
        }
        match &self.pending {
            None => copy_columns(&self.words, self.shift, columns),
            // Rows in a pending renumbering's order: one at a time.
            Some(pending) => {
                for &row in &pending.order {
                    for (column, word) in columns.iter_mut().zip(self.row(row)) {
                        column.push(*word);
                    }
                }
            }
        }
    }

    /// Appends accumulator `slot` of each of `groups`, in that order, to
    /// `columns[slot]`; with `reset`, puts each row back to its
    /// accumulators' identities once read (one pass over the rows, not two).
    pub fn columns_of(&mut self, groups: &[u32], columns: &mut [Vec<u64>], reset: bool) {
        match self.pending.take() {
            None => self.read_rows(groups, None, columns, reset),
            Some(mut pending) => {
                let Pending {
                    order,
                    reset: marks,
                    reset_count,
                } = &mut pending;
                self.read_rows(groups, Some(order), columns, reset);
                if reset {
                    for row in groups.iter().map(|g| order[*g as usize] as usize) {
                        let (word, bit) = (row >> 6, 1u64 << (row & 63));
                        *reset_count += usize::from(marks[word] & bit == 0);
                        marks[word] |= bit;
                    }
                }
                // Every row back at the identities: they are the same in
                // any order, so the renumbering is done.
                if *reset_count < self.groups() {
                    self.pending = Some(pending);
                }
            }
        }
    }

    /// Appends the rows of `groups` to `columns` (a column per slot), with
    /// `reset` putting each row back to the identities once read. With
    /// `order` (a pending renumbering), group `g`'s row is `order[g]`.
    ///
    /// Consecutive groups in their own order (every group of a range
    /// changed, as when every key is updated between checkpoints) are
    /// copied and reset a block at a time, as the whole table is. Other
    /// rows are read one by one into columns sized first and written by
    /// index: pushing each word checked each column's capacity per row,
    /// which took about a third longer (a hand-on's pieces, 1M rows of
    /// three slots). Rows read through `order` land at random in the table,
    /// so the row [`LOOKAHEAD`] groups on is asked for early.
    fn read_rows(
        &mut self,
        groups: &[u32],
        order: Option<&[u32]>,
        columns: &mut [Vec<u64>],
        reset: bool,
    ) {
        if order.is_none()
            && let Some(rows) = consecutive(groups)
        {
            let words = rows.start << self.shift..rows.end << self.shift;
            copy_columns(&self.words[words.clone()], self.shift, columns);
            if reset {
                let fresh = &self.fresh_rows;
                for block in self.words[words].chunks_mut(fresh.len()) {
                    block.copy_from_slice(&fresh[..block.len()]);
                }
            }
            return;
        }
        let width = 1usize << self.shift;
        let count = groups.len();
        let mut outs: Vec<&mut [u64]> = columns
            .iter_mut()
            .map(|column| {
                let start = column.len();
                column.resize(start + count, 0);
                &mut column[start..]
            })
            .collect();
        let row_of = |group: u32| order.map_or(group, |order| order[group as usize]) as usize;
        for (i, group) in groups.iter().enumerate() {
            if let (Some(_), Some(ahead)) = (order, groups.get(i + LOOKAHEAD)) {
                prefetch(&self.words, row_of(*ahead) << self.shift);
            }
            let row = &mut self.words[row_of(*group) << self.shift..][..width];
            for (out, word) in outs.iter_mut().zip(row.iter()) {
                out[i] = *word;
            }
            if reset {
                row.copy_from_slice(&self.fresh_rows[..width]);
            }
        }
    }

    /// The words of row `row`.
    fn row(&self, row: u32) -> &[u64] {
        &self.words[(row as usize) << self.shift..][..1 << self.shift]
    }

    /// Numbers the groups anew: group `order[i]` becomes group `i`
    /// (`order` holds each group once).
    ///
    /// The rows do not move yet. A pre-aggregation renumbers just before
    /// it reads every row out and resets it ([`columns_of`](Self::columns_of)),
    /// which reads through `order`; after that every row holds the
    /// identities and none has to move. Gathering the rows into new memory
    /// here first cost a pass over the table and a table's worth of fresh
    /// pages (which the kernel zeroes) per pre-aggregation, once a run.
    /// Anything else that touches the rows first moves them (a gather:
    /// independent reads, whose cache misses the processor overlaps;
    /// swapping rows in place cycle by cycle was ten times slower).
    pub fn renumber(&mut self, order: Vec<u32>) {
        self.settle();
        debug_assert_eq!(order.len(), self.groups());
        self.pending = Some(Pending {
            reset: vec![0; order.len().div_ceil(64)],
            reset_count: 0,
            order,
        });
    }

    /// Moves the rows to where a pending renumbering puts them.
    fn settle(&mut self) {
        let Some(pending) = self.pending.take() else {
            return;
        };
        let mut words = Vec::with_capacity(self.words.len());
        for &row in &pending.order {
            words.extend_from_slice(self.row(row));
        }
        self.words = words;
    }

    /// Sets accumulator `slot` of groups `0..` from `values`.
    pub fn set_column<T: Word>(&mut self, slot: usize, values: impl Iterator<Item = T>) {
        self.settle();
        for (row, value) in self.words.chunks_exact_mut(1 << self.shift).zip(values) {
            row[slot] = value.to_word();
        }
    }
}

/// Appends word `slot` of each row of `rows` (rows of `1 << shift` words)
/// to `columns[slot]`. A block of rows at a time, column by column: the
/// block stays in the cache between its columns, and each column grows
/// from an iterator of known length, without a capacity check per word.
/// Pushing each word of a row in turn took about twice as long (a 1M-key
/// snapshot, docs/benchmarks.md, forty-first session).
fn copy_columns(rows: &[u64], shift: u32, columns: &mut [Vec<u64>]) {
    for block in rows.chunks(COPY_BLOCK_ROWS << shift) {
        for (slot, column) in columns.iter_mut().enumerate() {
            column.extend(block.chunks_exact(1 << shift).map(|row| row[slot]));
        }
    }
}

/// `groups` as a range of rows, when each is one more than the one before.
fn consecutive(groups: &[u32]) -> Option<Range<usize>> {
    let first = *groups.first()? as usize;
    let follow = groups
        .iter()
        .enumerate()
        .all(|(i, &group)| group as usize == first + i);
    follow.then_some(first..first + groups.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_padded_and_columns_round_trip() {
        let mut table = AccumulatorTable::new(&[0, f64::NEG_INFINITY.to_word(), 7]);
        table.resize(3);
        assert_eq!(table.groups(), 3);
        let (cells, shift) = table.cells();
        assert_eq!(shift, 2); // three slots padded to four
        cells[(1 << shift) | 1] = 2.5f64.to_word();
        table.set_column(2, [-1i64, -2, -3].into_iter());
        let mut columns = vec![Vec::new(); 3];
        table.columns_into(&mut columns);
        let floats: Vec<f64> = columns[1].iter().map(|w| f64::from_word(*w)).collect();
        assert_eq!(floats, vec![f64::NEG_INFINITY, 2.5, f64::NEG_INFINITY]);
        let ints = |c: &[u64]| c.iter().map(|w| i64::from_word(*w)).collect::<Vec<_>>();
        assert_eq!(ints(&columns[2]), vec![-1, -2, -3]);
        assert_eq!(ints(&columns[0]), vec![0, 0, 0]);
        table.resize(2); // never shrinks
        assert_eq!(table.groups(), 3);
    }

    #[test]
    fn columns_over_several_blocks_keep_every_row_in_order() {
        let groups = COPY_BLOCK_ROWS * 2 + 5;
        for slots in [1usize, 2, 3, 5] {
            let mut table = AccumulatorTable::new(&vec![0; slots]);
            table.resize(groups);
            for slot in 0..slots {
                let values = (0..groups as i64).map(|g| g * 10 + slot as i64);
                table.set_column(slot, values);
            }
            let mut columns = vec![vec![7u64]; slots]; // appended after what is there
            table.columns_into(&mut columns);
            for (slot, column) in columns.iter().enumerate() {
                let expected: Vec<u64> = std::iter::once(7)
                    .chain((0..groups as u64).map(|g| g * 10 + slot as u64))
                    .collect();
                assert!(*column == expected, "{slots} slots, slot {slot}");
            }
        }
    }

    #[test]
    fn consecutive_groups_are_read_and_reset_a_block_at_a_time() {
        let groups = COPY_BLOCK_ROWS * 2 + 3;
        let identities = [0, i64::MIN.to_word(), 7];
        let mut table = AccumulatorTable::new(&identities);
        table.resize(groups);
        let value = |g: usize, slot: usize| (g * 3 + slot) as i64 + 1000;
        for slot in 0..3 {
            table.set_column(slot, (0..groups).map(|g| value(g, slot)));
        }
        // Every group but the first and last, read with a reset: those
        // rows go back to the identities, the first and last keep theirs.
        let read: Vec<u32> = (1..groups as u32 - 1).collect();
        let mut columns = vec![Vec::new(); 3];
        table.columns_of(&read, &mut columns, true);
        for (slot, column) in columns.iter().enumerate() {
            let expected: Vec<u64> = (1..groups - 1).map(|g| value(g, slot).to_word()).collect();
            assert!(*column == expected, "slot {slot} read before the reset");
        }
        let mut all = vec![Vec::new(); 3];
        table.columns_into(&mut all);
        for (slot, column) in all.iter().enumerate() {
            assert_eq!(column[0], value(0, slot).to_word(), "the first untouched");
            assert_eq!(column[groups - 1], value(groups - 1, slot).to_word());
            assert!(
                column[1..groups - 1].iter().all(|w| *w == identities[slot]),
                "slot {slot}: every row read is back at its identity"
            );
        }
        let mut changed = Vec::new();
        table.changed_rows(0..groups as u32, groups, usize::MAX, &mut changed);
        assert_eq!(changed, vec![0, groups as u32 - 1]);
    }

    #[test]
    fn only_ascending_groups_without_gaps_are_consecutive() {
        for (groups, rows) in [
            (vec![], None),
            (vec![5], Some(5..6)),
            (vec![5, 6, 7], Some(5..8)),
            (vec![5, 7], None),
            (vec![6, 5], None),
            (vec![5, 6, 6], None),
            (vec![0, 1, 2, 4], None),
        ] {
            assert_eq!(consecutive(&groups), rows, "{groups:?}");
        }
    }

    #[test]
    fn changed_rows_are_the_new_groups_and_the_old_ones_off_their_identities() {
        let mut table = AccumulatorTable::new(&[0, i64::MIN.to_word()]);
        table.resize(6);
        let (cells, shift) = table.cells();
        cells[1 << shift] = 3; // group 1, first slot
        cells[(4 << shift) | 1] = 9; // group 4 (new), second slot
        let mut changed = Vec::new();
        assert_eq!(table.changed_rows(0..6, 3, usize::MAX, &mut changed), 6);
        assert_eq!(changed, vec![1, 3, 4, 5]);
        // Found a few at a time, each search going on where the last stopped.
        let mut parts = Vec::new();
        for (range, max, stop, found) in [
            (0..6, 1, 2, vec![1]),
            (2..6, 2, 5, vec![3, 4]),
            (5..6, 2, 6, vec![5]),
            (6..6, 2, 6, vec![]),
            (2..4, 5, 4, vec![3]),
            (0..9, 0, 0, vec![]),
            (4..u32::MAX, 9, 6, vec![4, 5]),
        ] {
            parts.clear();
            let at = table.changed_rows(range.clone(), 3, max, &mut parts);
            assert_eq!((at, &parts), (stop, &found), "{range:?}, at most {max}");
        }
        let mut read = vec![Vec::new(); 2];
        table.columns_of(&changed, &mut read, true);
        assert_eq!(read[0], vec![3, 0, 0, 0], "read before the reset");
        assert_eq!(read[1][2], 9);
        changed.clear();
        table.changed_rows(0..6, 6, usize::MAX, &mut changed);
        assert!(
            changed.is_empty(),
            "all back at their identities: {changed:?}"
        );
        changed.clear();
        table.changed_rows(0..u32::MAX, usize::MAX, usize::MAX, &mut changed);
        assert!(changed.is_empty(), "no group past the last one is new");
    }

    #[test]
    fn renumbered_rows_move_whole() {
        let mut table = AccumulatorTable::new(&[0, 0, 0]);
        table.resize(4);
        table.set_column(0, [10i64, 11, 12, 13].into_iter());
        table.set_column(2, [20i64, 21, 22, 23].into_iter());
        table.renumber(vec![2, 3, 0, 1]);
        let mut columns = vec![Vec::new(); 3];
        table.columns_into(&mut columns);
        assert_eq!(columns[0], vec![12, 13, 10, 11]);
        assert_eq!(columns[1], vec![0; 4]);
        assert_eq!(columns[2], vec![22, 23, 20, 21]);
        // Moved before the rows are updated.
        let (cells, shift) = table.cells();
        cells[1 << shift] += 100; // group 1, first slot
        let mut columns = vec![Vec::new(); 3];
        table.columns_into(&mut columns);
        assert_eq!(columns[0], vec![12, 113, 10, 11]);
    }

    #[test]
    fn a_renumbering_is_read_through_until_the_rows_move_or_are_all_reset() {
        let table = || {
            let mut table = AccumulatorTable::new(&[0, 7]);
            table.resize(4);
            table.set_column(0, [10i64, 11, 12, 13].into_iter());
            table.renumber(vec![3, 1, 0, 2]);
            table
        };
        let read = |table: &mut AccumulatorTable, groups: &[u32], reset: bool| {
            let mut columns = vec![Vec::new(); 2];
            table.columns_of(groups, &mut columns, reset);
            columns[0].clone()
        };
        let all = |table: &AccumulatorTable| {
            let mut columns = vec![Vec::new(); 2];
            table.columns_into(&mut columns);
            (columns[0].clone(), columns[1].clone())
        };
        // Every group read with a reset (one twice): all at the
        // identities, nothing left pending.
        let mut whole = table();
        assert_eq!(read(&mut whole, &[0, 2], true), vec![13, 10]);
        assert_eq!(read(&mut whole, &[2, 1, 3], true), vec![0, 11, 12]);
        assert!(whole.pending.is_none(), "every row reset");
        assert_eq!(all(&whole), (vec![0; 4], vec![7; 4]));
        // Some read with a reset, some without: the rest keep their words
        // under the new numbers, read through and once moved.
        let mut part = table();
        assert_eq!(read(&mut part, &[1, 3], true), vec![11, 12]);
        assert_eq!(read(&mut part, &[0, 1], false), vec![13, 0]);
        assert!(part.pending.is_some(), "groups 0 and 2 not reset");
        let mut changed = Vec::new();
        part.changed_rows(0..4, 4, usize::MAX, &mut changed);
        assert_eq!(changed, vec![0, 2], "read through the renumbering");
        assert_eq!(all(&part), (vec![13, 0, 10, 0], vec![7; 4]));
        part.resize(5); // moves the rows, then adds a group
        assert!(part.pending.is_none());
        assert_eq!(all(&part), (vec![13, 0, 10, 0, 0], vec![7; 5]));
    }
}
