//! The order in which a pre-aggregation hands its changed groups on: in
//! pieces of at most a given size, each bound for one downstream subtask
//! when the groups' subtasks are known, taking the subtasks in turns.
//!
//! A piece bound for one subtask crosses the shuffle whole (no hashing, no
//! split copy). Taking turns keeps every downstream subtask merging while
//! the hand-on goes on; sending all of one subtask's pieces first would
//! leave the others idle, and every upstream subtask would queue on the
//! same one.

use crate::transforms::counting_sort::order_by_bucket;

/// A run of the groups to hand on, all bound for one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// The next group of the run not yet handed on, and the run's end.
    next: usize,
    end: usize,
    /// The downstream subtask (`None`: the edge routes them).
    to: Option<usize>,
}

/// A hand-on under way (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct HandOn {
    /// The groups to hand on, one run per destination.
    groups: Vec<u32>,
    /// Room to order `groups` by destination, kept across hand-ons.
    spare: Vec<u32>,
    runs: Vec<Run>,
    /// The run whose turn it is.
    turn: usize,
}

impl HandOn {
    /// Whether a hand-on is under way (started, and pieces remain).
    pub(crate) fn under_way(&self) -> bool {
        self.runs.iter().any(|run| run.next < run.end)
    }

    /// Starts a hand-on of the groups `fill` appends (ascending). With
    /// `owners` (each group's downstream subtask) and the subtask count,
    /// the groups are ordered by subtask, stably, so that each run reads
    /// its groups in ascending order.
    pub(crate) fn start(
        &mut self,
        fill: impl FnOnce(&mut Vec<u32>),
        owners: Option<(&[u16], usize)>,
    ) {
        self.groups.clear();
        self.runs.clear();
        self.turn = 0;
        fill(&mut self.groups);
        let Some((owners, subtasks)) = owners else {
            self.runs.push(Run {
                next: 0,
                end: self.groups.len(),
                to: None,
            });
            return;
        };
        let starts = order_by_bucket(
            &mut self.groups,
            subtasks,
            |group| usize::from(owners[group as usize]),
            &mut self.spare,
        );
        for subtask in 0..subtasks {
            if starts[subtask + 1] > starts[subtask] {
                self.runs.push(Run {
                    next: starts[subtask],
                    end: starts[subtask + 1],
                    to: Some(subtask),
                });
            }
        }
    }

    /// The next piece, at most `rows` groups bound for one destination,
    /// from the next run in turn that has groups left; `None` when done.
    pub(crate) fn next_piece(&mut self, rows: usize) -> Option<(&[u32], Option<usize>)> {
        let count = self.runs.len();
        let i = (0..count)
            .map(|k| (self.turn + k) % count)
            .find(|i| self.runs[*i].next < self.runs[*i].end)?;
        self.turn = (i + 1) % count;
        let run = &mut self.runs[i];
        let from = run.next;
        run.next = (from + rows.max(1)).min(run.end);
        Some((&self.groups[from..run.next], run.to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece's groups and destination.
    type Piece = (Vec<u32>, Option<usize>);
    /// Each group's subtask, and the subtask count.
    type Owners<'a> = Option<(&'a [u16], usize)>;

    fn pieces(groups: Vec<u32>, owners: Owners<'_>, rows: usize) -> Vec<Piece> {
        let mut hand_on = HandOn::default();
        hand_on.start(|into| into.extend(groups), owners);
        let mut out = Vec::new();
        while let Some((piece, to)) = hand_on.next_piece(rows) {
            out.push((piece.to_vec(), to));
        }
        assert!(!hand_on.under_way());
        out
    }

    #[test]
    fn pieces_take_the_destinations_in_turns_and_never_mix_them() {
        // Group g goes to owners[g].
        let owners: &[u16] = &[0, 1, 0, 2, 0, 0, 1, 0];
        let all: Vec<u32> = (0..8).collect();
        let cases: [(Vec<u32>, Owners<'_>, usize, Vec<Piece>); 5] = [
            // Unrouted: the groups in order, in pieces.
            (
                all.clone(),
                None,
                3,
                vec![
                    (vec![0, 1, 2], None),
                    (vec![3, 4, 5], None),
                    (vec![6, 7], None),
                ],
            ),
            // Routed: one subtask at a time, each ascending.
            (
                all.clone(),
                Some((owners, 3)),
                2,
                vec![
                    (vec![0, 2], Some(0)),
                    (vec![1, 6], Some(1)),
                    (vec![3], Some(2)),
                    (vec![4, 5], Some(0)),
                    (vec![7], Some(0)),
                ],
            ),
            // A subtask without groups gets no piece.
            (
                vec![0, 1, 2, 6],
                Some((owners, 3)),
                10,
                vec![(vec![0, 2], Some(0)), (vec![1, 6], Some(1))],
            ),
            (vec![], Some((owners, 3)), 4, vec![]),
            (vec![], None, 4, vec![]),
        ];
        for (groups, owners, rows, expected) in cases {
            assert_eq!(
                pieces(groups.clone(), owners, rows),
                expected,
                "{groups:?} by {rows}"
            );
        }
    }

    #[test]
    fn a_hand_on_is_under_way_until_its_last_piece() {
        let mut hand_on = HandOn::default();
        assert!(!hand_on.under_way());
        hand_on.start(|into| into.extend(0..5), None);
        assert!(hand_on.under_way());
        assert!(hand_on.next_piece(4).is_some());
        assert!(hand_on.under_way());
        assert!(hand_on.next_piece(4).is_some());
        assert!(!hand_on.under_way());
        assert!(hand_on.next_piece(4).is_none());
    }
}
