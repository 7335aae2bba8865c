//! The order in which a pre-aggregation hands its changed groups on: in
//! pieces of about a given size, each bound for one downstream subtask
//! when the groups' subtasks are known, taking the subtasks in turns.
//!
//! A piece bound for one subtask crosses the shuffle whole (no hashing, no
//! split copy). Taking turns keeps every downstream subtask merging while
//! the hand-on goes on; sending all of one subtask's pieces first would
//! leave the others idle, and every upstream subtask would queue on the
//! same one.
//!
//! Where each subtask's groups are numbered in one contiguous range (after
//! a renumbering in key group order), or all go one way (unrouted), a
//! piece is found by looking through the range for the next changed
//! groups just before they are read out, so that their rows are still in
//! the cache when they are; a list of every changed group, made first,
//! cost a pass over the whole table of its own. Groups numbered after the
//! renumbering are listed first and sorted by subtask.

use std::ops::Range;

use crate::transforms::counting_sort::order_by_bucket;

/// Looks for changed groups: appends those of `range` to the list, in
/// ascending order, until it holds `max` more (a few more may come on top),
/// and returns where it stopped, the range's end when fewer were found
/// (see `AggregateOperator::changed_groups`).
pub(crate) trait FindChanged: FnMut(Range<u32>, usize, &mut Vec<u32>) -> u32 {}

impl<F: FnMut(Range<u32>, usize, &mut Vec<u32>) -> u32> FindChanged for F {}

/// A run of the groups to hand on, all bound for one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// Where the run goes on, and its end: group numbers to look through,
    /// or places in the list of changed groups.
    next: usize,
    end: usize,
    /// The downstream subtask (`None`: the edge routes them).
    to: Option<usize>,
    /// Whether `next..end` are group numbers to look through.
    numbers: bool,
}

/// Where each group goes: its downstream subtask, by group number.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owners<'a> {
    /// Each group's downstream subtask.
    pub of: &'a [u16],
    /// The number of downstream subtasks.
    pub subtasks: usize,
    /// Groups below this number have non-decreasing subtasks (numbered in
    /// key group order); 0 when none are known to.
    pub ordered_below: u32,
}

/// A hand-on under way (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HandOn {
    /// The changed groups at or above [`Owners::ordered_below`], ordered
    /// by destination (after a renumbering, only the few keys that came
    /// later).
    listed: Vec<u32>,
    /// Room to order them in, kept across hand-ons.
    spare: Vec<u32>,
    /// The piece last found by looking through a range.
    piece: Vec<u32>,
    runs: Vec<Run>,
    /// The run whose turn it is.
    turn: usize,
}

impl HandOn {
    /// Whether a hand-on is under way: started, and not yet looked through
    /// to its end (the last call to [`next_piece`](Self::next_piece) may
    /// find nothing left).
    pub(crate) fn under_way(&self) -> bool {
        self.runs.iter().any(|run| run.next < run.end)
    }

    /// Starts a hand-on of the changed groups among the first `groups`.
    /// Without `owners`, they are looked through in one run, as pieces are
    /// asked for. With `owners`, each run holds one subtask's groups, in
    /// ascending order: those below [`Owners::ordered_below`] are each
    /// subtask's range of group numbers, found by binary search and looked
    /// through as pieces are asked for; the changed groups from there on
    /// are found now and sorted by subtask, stably.
    pub(crate) fn start(
        &mut self,
        groups: u32,
        owners: Option<Owners<'_>>,
        mut find: impl FindChanged,
    ) {
        self.listed.clear();
        self.runs.clear();
        self.turn = 0;
        let Some(owners) = owners else {
            self.push_run(0, groups as usize, None, true);
            return;
        };
        let owner = |group: u32| usize::from(owners.of[group as usize]);
        let ordered = owners.ordered_below.min(groups) as usize;
        let mut from = 0;
        for subtask in 0..owners.subtasks {
            let end =
                from + owners.of[from..ordered].partition_point(|o| usize::from(*o) <= subtask);
            self.push_run(from, end, Some(subtask), true);
            from = end;
        }
        debug_assert_eq!(
            from, ordered,
            "groups below ordered_below out of subtask order"
        );
        find(ordered as u32..groups, usize::MAX, &mut self.listed);
        let starts = order_by_bucket(&mut self.listed, owners.subtasks, owner, &mut self.spare);
        for subtask in 0..owners.subtasks {
            self.push_run(starts[subtask], starts[subtask + 1], Some(subtask), false);
        }
    }

    fn push_run(&mut self, next: usize, end: usize, to: Option<usize>, numbers: bool) {
        if end > next {
            self.runs.push(Run {
                next,
                end,
                to,
                numbers,
            });
        }
    }

    /// The next piece, about `rows` groups bound for one destination, from
    /// the next run in turn that has changed groups left; `None` when done.
    pub(crate) fn next_piece(
        &mut self,
        rows: usize,
        mut find: impl FindChanged,
    ) -> Option<(&[u32], Option<usize>)> {
        let rows = rows.max(1);
        let count = self.runs.len();
        loop {
            let i = (0..count)
                .map(|k| (self.turn + k) % count)
                .find(|i| self.runs[*i].next < self.runs[*i].end)?;
            self.turn = (i + 1) % count;
            let run = &mut self.runs[i];
            let from = run.next;
            if !run.numbers {
                run.next = (from + rows).min(run.end);
                return Some((&self.listed[from..run.next], run.to));
            }
            self.piece.clear();
            let stop = find(from as u32..run.end as u32, rows, &mut self.piece) as usize;
            // Always on: a run never hands on a group twice.
            run.next = stop.clamp(from + 1, run.end);
            if !self.piece.is_empty() {
                return Some((&self.piece, run.to));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece's groups and destination.
    type Piece = (Vec<u32>, Option<usize>);
    /// Groups to hand on, where they go, piece size, and the pieces.
    type Case<'a> = (Vec<u32>, Option<Owners<'a>>, usize, Vec<Piece>);

    /// Finds changed groups among `changed` (ascending), as a table would.
    fn find_in(changed: &[u32]) -> impl FindChanged + '_ {
        |range: Range<u32>, max, into: &mut Vec<u32>| {
            let from = changed.partition_point(|g| *g < range.start);
            let found = changed[from..]
                .iter()
                .take_while(|g| **g < range.end)
                .take(max);
            let before = into.len();
            into.extend(found);
            match into.len() - before {
                n if n == max => into[into.len() - 1] + 1,
                _ => range.end,
            }
        }
    }

    fn pieces(groups: Vec<u32>, owners: Option<Owners<'_>>, rows: usize) -> Vec<Piece> {
        let count = owners.map_or(groups.last().map_or(0, |g| g + 1), |o| o.of.len() as u32);
        let mut hand_on = HandOn::default();
        hand_on.start(count, owners, find_in(&groups));
        let mut out = Vec::new();
        while let Some((piece, to)) = hand_on.next_piece(rows, find_in(&groups)) {
            out.push((piece.to_vec(), to));
        }
        assert!(!hand_on.under_way());
        out
    }

    #[test]
    fn pieces_take_the_destinations_in_turns_and_never_mix_them() {
        // Group g goes to owners[g]; 0..5 are in subtask order, as after a
        // renumbering, and 5.. came later.
        let of: &[u16] = &[0, 0, 1, 1, 2, 0, 2, 1, 0];
        let owners = |ordered_below| {
            Some(Owners {
                of,
                subtasks: 3,
                ordered_below,
            })
        };
        let all: Vec<u32> = (0..9).collect();
        let cases: [Case<'_>; 8] = [
            // Unrouted: the groups in order, in pieces.
            (
                all.clone(),
                None,
                4,
                vec![
                    (vec![0, 1, 2, 3], None),
                    (vec![4, 5, 6, 7], None),
                    (vec![8], None),
                ],
            ),
            // Routed, nothing known to be in order: sorted by subtask,
            // one subtask at a time, each ascending.
            (
                all.clone(),
                owners(0),
                2,
                vec![
                    (vec![0, 1], Some(0)),
                    (vec![2, 3], Some(1)),
                    (vec![4, 6], Some(2)),
                    (vec![5, 8], Some(0)),
                    (vec![7], Some(1)),
                ],
            ),
            // The ordered groups' runs first, then the later groups' runs.
            (
                all.clone(),
                owners(5),
                2,
                vec![
                    (vec![0, 1], Some(0)),
                    (vec![2, 3], Some(1)),
                    (vec![4], Some(2)),
                    (vec![5, 8], Some(0)),
                    (vec![7], Some(1)),
                    (vec![6], Some(2)),
                ],
            ),
            // Everything ordered: no tail.
            (
                vec![0, 2, 3, 4],
                owners(5),
                1,
                vec![
                    (vec![0], Some(0)),
                    (vec![2], Some(1)),
                    (vec![4], Some(2)),
                    (vec![3], Some(1)),
                ],
            ),
            // Only later groups.
            (
                vec![6, 7, 8],
                owners(5),
                10,
                vec![(vec![8], Some(0)), (vec![7], Some(1)), (vec![6], Some(2))],
            ),
            // A subtask without groups gets no piece.
            (
                vec![0, 2, 5],
                owners(5),
                10,
                vec![(vec![0], Some(0)), (vec![2], Some(1)), (vec![5], Some(0))],
            ),
            (vec![], owners(5), 4, vec![]),
            (vec![], None, 4, vec![]),
        ];
        for (groups, owners, rows, expected) in cases {
            assert_eq!(
                pieces(groups.clone(), owners, rows),
                expected,
                "{groups:?} by {rows}, ordered below {:?}",
                owners.map(|o| o.ordered_below)
            );
        }
    }

    #[test]
    fn every_group_goes_once_to_its_subtask_whatever_part_is_ordered() {
        // Owners ordered on a prefix of each length, random after it.
        let mut drawn = 0;
        let mut next = move || {
            drawn += 1;
            crate::splitmix64(drawn)
        };
        for round in 0..300 {
            let (len, subtasks) = (next() % 50, 1 + next() as usize % 4);
            let ordered_below = (next() % (len + 1)) as u32;
            let mut of: Vec<u16> = (0..len)
                .map(|_| (next() % subtasks as u64) as u16)
                .collect();
            of[..ordered_below as usize].sort_unstable();
            let groups: Vec<u32> = (0..len as u32).filter(|_| next() % 3 != 0).collect();
            let owners = Owners {
                of: &of,
                subtasks,
                ordered_below,
            };
            let mut seen = Vec::new();
            for (piece, to) in pieces(groups.clone(), Some(owners), 1 + next() as usize % 5) {
                assert!(
                    piece.windows(2).all(|w| w[0] < w[1]),
                    "round {round}: {piece:?} not ascending"
                );
                for group in piece {
                    assert_eq!(Some(usize::from(of[group as usize])), to, "round {round}");
                    seen.push(group);
                }
            }
            seen.sort_unstable();
            assert_eq!(seen, groups, "round {round}: each group once");
        }
    }

    #[test]
    fn a_hand_on_is_under_way_until_it_has_looked_through_its_groups() {
        let changed = [0, 1, 2, 3, 4];
        let mut hand_on = HandOn::default();
        assert!(!hand_on.under_way());
        hand_on.start(8, None, find_in(&changed));
        assert!(hand_on.under_way());
        assert_eq!(
            hand_on.next_piece(4, find_in(&changed)).unwrap().0,
            [0, 1, 2, 3]
        );
        assert!(hand_on.under_way());
        assert_eq!(hand_on.next_piece(4, find_in(&changed)).unwrap().0, [4]);
        assert!(!hand_on.under_way());
        assert!(hand_on.next_piece(4, find_in(&changed)).is_none());
        // A last piece that fills up leaves the rest to look through.
        hand_on.start(8, None, find_in(&changed[..4]));
        assert!(hand_on.next_piece(4, find_in(&changed[..4])).is_some());
        assert!(hand_on.under_way());
        assert!(hand_on.next_piece(4, find_in(&changed[..4])).is_none());
        assert!(!hand_on.under_way());
    }
}
