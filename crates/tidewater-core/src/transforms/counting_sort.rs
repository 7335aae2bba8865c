//! A stable counting sort of ids by a small bucket number: two passes over
//! the ids, no comparisons. A pre-aggregation orders its groups by
//! downstream subtask for each hand-on, and by key group once before its
//! first; both order up to millions of groups into a few thousand buckets.

/// Fills `into` with `ids` ordered by `bucket_of(id)` (each below
/// `buckets`), ids of one bucket in the order they came, and returns each
/// bucket's start in `into` followed by the end: bucket `b` is
/// `into[starts[b]..starts[b + 1]]`. `into` is cleared first; a caller
/// that sorts again and again keeps it, so that its memory is not faulted
/// in anew each time.
pub(crate) fn sort_by_bucket<I>(
    ids: I,
    buckets: usize,
    bucket_of: impl Fn(u32) -> usize,
    into: &mut Vec<u32>,
) -> Vec<usize>
where
    I: IntoIterator<Item = u32>,
    I::IntoIter: Clone,
{
    let ids = ids.into_iter();
    let mut starts = vec![0usize; buckets + 1];
    for id in ids.clone() {
        starts[bucket_of(id) + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    into.clear();
    into.resize(starts[buckets], 0);
    let mut next = starts.clone();
    for id in ids {
        let at = &mut next[bucket_of(id)];
        into[*at] = id;
        *at += 1;
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_in_bucket_order_and_keep_their_order_within_a_bucket() {
        // (ids, each id's bucket by id, bucket count, ordered ids, starts)
        type Case = (
            &'static [u32],
            &'static [usize],
            usize,
            &'static [u32],
            &'static [usize],
        );
        let cases: [Case; 5] = [
            (&[], &[], 3, &[], &[0, 0, 0, 0]),
            (&[0], &[0], 1, &[0], &[0, 1]),
            (
                &[0, 1, 2, 3, 4],
                &[2, 0, 2, 1, 0],
                3,
                &[1, 4, 3, 0, 2],
                &[0, 2, 3, 5],
            ),
            // Only some ids, in a given order: that order within a bucket.
            (&[4, 2, 1], &[2, 0, 2, 1, 0], 3, &[4, 1, 2], &[0, 2, 2, 3]),
            // An empty bucket in the middle.
            (&[0, 1], &[2, 0, 2], 3, &[1, 0], &[0, 1, 1, 2]),
        ];
        let mut into = vec![9, 9, 9, 9, 9, 9, 9];
        for (ids, bucket, buckets, ordered, starts) in cases {
            let got = sort_by_bucket(
                ids.iter().copied(),
                buckets,
                |id| bucket[id as usize],
                &mut into,
            );
            assert_eq!(
                (into.as_slice(), got.as_slice()),
                (ordered, starts),
                "{ids:?}"
            );
        }
    }
}
