//! A stable counting sort of ids by a small bucket number: two passes over
//! the ids (one when they are in order already), no comparisons. A
//! pre-aggregation orders its groups by downstream subtask for each
//! hand-on, and by key group once before its first; both order up to
//! millions of groups into a few thousand buckets.

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
    let (starts, _) = bucket_starts(ids.clone(), buckets, &bucket_of);
    place(ids, &starts, &bucket_of, into);
    starts
}

/// Orders `ids` by `bucket_of(id)` in place, as [`sort_by_bucket`] does,
/// and returns the buckets' starts. Ids already in bucket order stay where
/// they are: one pass over them, no copy. A hand-on orders here the
/// groups not numbered in key group order (see
/// [`HandOn::start`](super::hand_on::HandOn::start)). `spare` is the room
/// they are ordered into when they are not in order, then copied back.
pub(crate) fn order_by_bucket(
    ids: &mut [u32],
    buckets: usize,
    bucket_of: impl Fn(u32) -> usize,
    spare: &mut Vec<u32>,
) -> Vec<usize> {
    let (starts, in_order) = bucket_starts(ids.iter().copied(), buckets, &bucket_of);
    if !in_order {
        place(ids.iter().copied(), &starts, &bucket_of, spare);
        ids.copy_from_slice(spare);
    }
    starts
}

/// Each bucket's start once `ids` are ordered by bucket, then the end, and
/// whether they already are.
fn bucket_starts(
    ids: impl Iterator<Item = u32>,
    buckets: usize,
    bucket_of: impl Fn(u32) -> usize,
) -> (Vec<usize>, bool) {
    let mut starts = vec![0usize; buckets + 1];
    let (mut last, mut in_order) = (0, true);
    for id in ids {
        let bucket = bucket_of(id);
        in_order &= bucket >= last;
        last = bucket;
        starts[bucket + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    (starts, in_order)
}

/// Writes `ids` into `into` at their buckets' `starts`, in the order they come.
fn place(
    ids: impl Iterator<Item = u32>,
    starts: &[usize],
    bucket_of: impl Fn(u32) -> usize,
    into: &mut Vec<u32>,
) {
    into.clear();
    into.resize(starts[starts.len() - 1], 0);
    let mut next = starts.to_vec();
    for id in ids {
        let at = &mut next[bucket_of(id)];
        into[*at] = id;
        *at += 1;
    }
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
        let cases: [Case; 7] = [
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
            // Already in bucket order, with a bucket skipped.
            (
                &[1, 3, 0, 2],
                &[2, 0, 2, 0],
                3,
                &[1, 3, 0, 2],
                &[0, 2, 2, 4],
            ),
            // In order but for the last id.
            (&[1, 0, 3], &[2, 0, 2, 0], 3, &[1, 3, 0], &[0, 2, 2, 3]),
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
            let mut in_place = ids.to_vec();
            let got = order_by_bucket(&mut in_place, buckets, |id| bucket[id as usize], &mut into);
            assert_eq!(
                (in_place.as_slice(), got.as_slice()),
                (ordered, starts),
                "{ids:?} in place"
            );
        }
    }
}
