//! Groups numbered in the order of their key groups, so that partials
//! handed on in group order reach the merge in key group order too.
//!
//! A pre-aggregation numbers its groups as their keys first come, which for
//! most inputs is a random order of the keys' hashes. The merge numbers its
//! own groups as partials first come from the pre-aggregations. When every
//! pre-aggregation hands its first partials on in key group order, the
//! merge's numbering follows the key groups as well, and every later
//! hand-on (again in key group order) updates the merge's table from one
//! end to the other, near where the previous piece did, instead of at
//! random places of a table larger than the cache.

use crate::transforms::counting_sort::sort_by_bucket;

/// The rows of `key_groups` (each row's key group, below `count`) in
/// ascending order of their key groups; rows of one key group keep their
/// order.
pub(crate) fn by_key_group(key_groups: &[u32], count: u32) -> Vec<u32> {
    let mut order = Vec::new();
    sort_by_bucket(
        0..key_groups.len() as u32,
        count as usize,
        |row| key_groups[row as usize] as usize,
        &mut order,
    );
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_in_key_group_order_and_keep_their_order_within_a_group() {
        let cases: [(&[u32], u32, &[u32]); 5] = [
            (&[], 4, &[]),
            (&[0], 1, &[0]),
            (&[3, 1, 3, 0, 1], 4, &[3, 1, 4, 0, 2]),
            // Already in order: unchanged.
            (&[0, 0, 1, 2, 2], 3, &[0, 1, 2, 3, 4]),
            // Descending: reversed.
            (&[2, 1, 0], 3, &[2, 1, 0]),
        ];
        for (key_groups, count, expected) in cases {
            assert_eq!(by_key_group(key_groups, count), expected, "{key_groups:?}");
        }
    }
}
