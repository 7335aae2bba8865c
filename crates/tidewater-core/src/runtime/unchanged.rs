//! Small states that did not change since a subtask's previous checkpoint
//! are not written again: the checkpoint lists the blob written before,
//! the way an incremental chain with nothing new goes on.
//!
//! Much of a checkpoint's fixed cost on a local folder is files: each blob
//! is a file created, synced and renamed, in a folder created and synced,
//! and deleted again by retention. A sink with nothing open, a source whose
//! splits are done, an operator whose state sits still: each would cost
//! that every checkpoint to write bytes it already wrote.
//!
//! Only whole states are compared (deltas have their own chains), and only
//! small ones: comparing and keeping a copy costs little, while a large
//! state that did not change would rather be an incremental chain. A state
//! is written anew after [`MAX_CARRIED`] checkpoints in a row without it,
//! since retention keeps each folder a retained checkpoint lists a blob
//! in, with all the other blobs that folder holds.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use super::chain::OperatorState;

/// States up to this size in memory are compared with the previous one.
pub(crate) const COMPARED_MAX_BYTES: usize = 64 << 10;

/// Checkpoints in a row that may list a state written before them. As
/// [`DEFAULT_FULL_EVERY`](crate::checkpoint::incremental::DEFAULT_FULL_EVERY)
/// bounds a chain, this bounds how long a folder stays for one blob.
pub(crate) const MAX_CARRIED: u32 = 100;

/// The small whole states a subtask wrote, or carried, at its previous
/// checkpoint.
#[derive(Debug, Default)]
pub(crate) struct UnchangedStates {
    previous: HashMap<Arc<str>, Previous>,
}

#[derive(Debug)]
struct Previous {
    state: RecordBatch,
    /// Checkpoints in a row that carried it since it was written.
    carried: u32,
}

impl UnchangedStates {
    /// Splits a checkpoint's `states` into those to write and the uids
    /// whose state is the same as at the previous checkpoint (the blob
    /// listed then is listed again). `comparable` says which uids' whole
    /// states may be compared (not an operator with an incremental chain,
    /// whose full snapshot starts a chain).
    ///
    /// The previous checkpoint is the one before in this run: a run's
    /// first checkpoint writes every state, and a failed checkpoint fails
    /// the run, so the previous one is complete when this one is.
    pub(crate) fn split(
        &mut self,
        states: Vec<OperatorState>,
        comparable: impl Fn(&str) -> bool,
    ) -> (Vec<OperatorState>, Vec<Arc<str>>) {
        let mut previous = std::mem::take(&mut self.previous);
        let mut write = Vec::with_capacity(states.len());
        let mut carried = Vec::new();
        for state in states {
            if state.delta
                || !comparable(&state.uid)
                || state.batch.get_array_memory_size() > COMPARED_MAX_BYTES
            {
                write.push(state);
                continue;
            }
            let uid = state.uid.clone();
            let kept = match previous.remove(&uid) {
                Some(p) if p.carried < MAX_CARRIED && p.state == state.batch => {
                    carried.push(uid.clone());
                    Previous {
                        carried: p.carried + 1,
                        ..p
                    }
                }
                _ => {
                    let kept = Previous {
                        state: state.batch.clone(),
                        carried: 0,
                    };
                    write.push(state);
                    kept
                }
            };
            self.previous.insert(uid, kept);
        }
        (write, carried)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn state(uid: &str, values: &[i64], delta: bool) -> OperatorState {
        let column = Arc::new(Int64Array::from(values.to_vec()));
        OperatorState {
            uid: uid.into(),
            batch: RecordBatch::try_from_iter([("v", column as _)]).unwrap(),
            delta,
        }
    }

    /// Runs checkpoints of `(uid, value, delta)` states through one
    /// subtask's [`UnchangedStates`] ("x" is not comparable); returns, per
    /// checkpoint, the uids written and those carried.
    fn run(checkpoints: &[&[(&str, i64, bool)]]) -> Vec<(Vec<String>, Vec<String>)> {
        let mut unchanged = UnchangedStates::default();
        let names = |uids: Vec<Arc<str>>| uids.iter().map(|u| u.to_string()).collect();
        checkpoints
            .iter()
            .map(|states| {
                let states = states.iter().map(|(u, v, d)| state(u, &[*v], *d)).collect();
                let (write, carried) = unchanged.split(states, |uid| uid != "x");
                (
                    names(write.into_iter().map(|s| s.uid).collect()),
                    names(carried),
                )
            })
            .collect()
    }

    fn uids(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn a_state_equal_to_the_previous_one_is_carried_and_any_other_written() {
        type Case = (
            &'static [&'static [(&'static str, i64, bool)]],
            Vec<(&'static [&'static str], &'static [&'static str])>,
        );
        let cases: Vec<Case> = vec![
            // The first checkpoint writes; the same again is carried;
            // a change is written, and so is going back to an older value.
            (
                &[
                    &[("a", 1, false), ("b", 1, false)],
                    &[("a", 1, false), ("b", 2, false)],
                    &[("a", 1, false), ("b", 1, false)],
                ],
                vec![(&["a", "b"], &[]), (&["b"], &["a"]), (&["b"], &["a"])],
            ),
            // A state missing from one checkpoint is written when it comes
            // back: the checkpoint before lists no blob of it to carry.
            (
                &[&[("a", 1, false)], &[], &[("a", 1, false)]],
                vec![(&["a"], &[]), (&[], &[]), (&["a"], &[])],
            ),
            // Deltas and states that may not be compared are always written.
            (
                &[
                    &[("a", 1, true), ("x", 1, false)],
                    &[("a", 1, true), ("x", 1, false)],
                ],
                vec![(&["a", "x"], &[]), (&["a", "x"], &[])],
            ),
        ];
        for (checkpoints, expected) in cases {
            let expected: Vec<_> = expected.iter().map(|(w, c)| (uids(w), uids(c))).collect();
            assert_eq!(run(checkpoints), expected, "{checkpoints:?}");
        }
    }

    #[test]
    fn a_large_state_is_always_written() {
        let values: Vec<i64> = (0..(COMPARED_MAX_BYTES / 8 + 1) as i64).collect();
        let mut unchanged = UnchangedStates::default();
        for _ in 0..3 {
            let (write, carried) = unchanged.split(vec![state("a", &values, false)], |_| true);
            assert_eq!((write.len(), carried.len()), (1, 0));
        }
    }

    #[test]
    fn a_state_is_written_again_after_max_carried_checkpoints_in_a_row() {
        let mut unchanged = UnchangedStates::default();
        let mut written_at = Vec::new();
        for checkpoint in 0..=2 * (MAX_CARRIED + 1) {
            let (write, _) = unchanged.split(vec![state("a", &[7], false)], |_| true);
            if !write.is_empty() {
                written_at.push(checkpoint);
            }
        }
        assert_eq!(written_at, [0, MAX_CARRIED + 1, 2 * (MAX_CARRIED + 1)]);
    }
}
