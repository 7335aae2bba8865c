//! Maps the key columns of each row to a dense group number.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::buffer::ScalarBuffer;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, SortField};
use foldhash::fast::RandomState;
use hashbrown::HashMap;

use super::prefetch::{LOOKAHEAD, prefetch};
use super::spare_columns::SpareColumns;
use crate::error::{Error, Result};

/// The direct table's largest size (16 MiB of slots).
const DENSE_MAX_SLOTS: usize = 1 << 22;
/// The direct table grows only while it has at most this many slots per group.
const DENSE_SPARSITY: usize = 8;
/// Below this many slots, the table grows whatever the density.
const DENSE_MIN_SLOTS: usize = 1 << 16;

/// Group numbers for key values. A single non-dictionary Int64 key (the
/// common case) avoids row encoding; any other key goes through Arrow's row format.
pub(crate) enum GroupIndex {
    Int64 {
        /// Small non-negative keys index this table directly (group + 1; 0 =
        /// no group yet): no hashing, and a quarter of a hash table's memory
        /// traffic. It grows while at least 1 slot in [`DENSE_SPARSITY`] is
        /// used, up to [`DENSE_MAX_SLOTS`].
        dense: Vec<u32>,
        /// Every other key.
        map: HashMap<i64, u32, RandomState>,
        keys: Vec<i64>,
        null_group: Option<u32>,
    },
    Rows {
        converter: RowConverter,
        map: HashMap<Box<[u8]>, u32, RandomState>,
        keys: Vec<Box<[u8]>>,
        /// Bytes of the encoded keys (each is held twice: map and list).
        key_bytes: usize,
    },
}

impl GroupIndex {
    pub fn new(key_types: &[DataType]) -> Result<Self> {
        Ok(if key_types == [DataType::Int64] {
            GroupIndex::Int64 {
                dense: Vec::new(),
                map: HashMap::default(),
                keys: Vec::new(),
                null_group: None,
            }
        } else {
            let fields = key_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect();
            GroupIndex::Rows {
                converter: RowConverter::new(fields)?,
                map: HashMap::default(),
                keys: Vec::new(),
                key_bytes: 0,
            }
        })
    }

    pub fn len(&self) -> usize {
        match self {
            GroupIndex::Int64 {
                keys, null_group, ..
            } => keys.len() + usize::from(null_group.is_some()),
            GroupIndex::Rows { keys, .. } => keys.len(),
        }
    }

    /// The memory the index holds, roughly: its tables and its copies of
    /// the keys.
    pub fn approx_bytes(&self) -> usize {
        match self {
            GroupIndex::Int64 {
                dense, map, keys, ..
            } => {
                dense.len() * size_of::<u32>()
                    + keys.len() * size_of::<i64>()
                    + map.capacity() * (size_of::<(i64, u32)>() + 1)
            }
            GroupIndex::Rows {
                map,
                keys,
                key_bytes,
                ..
            } => {
                2 * key_bytes
                    + keys.len() * size_of::<Box<[u8]>>()
                    + map.capacity() * (size_of::<(Box<[u8]>, u32)>() + 1)
            }
        }
    }

    /// Writes the group number of every row into `groups`, adding new groups.
    pub fn assign(&mut self, key_columns: &[ArrayRef], groups: &mut Vec<u32>) -> Result<()> {
        groups.clear();
        let next = self.len() as u32;
        match self {
            GroupIndex::Int64 {
                dense,
                map,
                keys,
                null_group,
            } => {
                let column = key_columns[0].as_primitive::<Int64Type>();
                groups.reserve(column.len());
                let mut next = next;
                let has_nulls = column.null_count() > 0;
                let values = column.values();
                for (i, &key) in values.iter().enumerate() {
                    if let Some(&ahead) = values.get(i + LOOKAHEAD) {
                        prefetch(dense, ahead as usize);
                    }
                    if has_nulls && column.is_null(i) {
                        let group = *null_group.get_or_insert_with(|| {
                            next += 1;
                            next - 1
                        });
                        groups.push(group);
                        continue;
                    }
                    let slot = usize::try_from(key)
                        .ok()
                        .filter(|k| *k < dense.len() || grow_dense(dense, map, key, keys.len()));
                    if let Some(slot) = slot {
                        let group = match dense[slot] {
                            0 => {
                                keys.push(key);
                                next += 1;
                                dense[slot] = next;
                                next - 1
                            }
                            plus_one => plus_one - 1,
                        };
                        groups.push(group);
                        continue;
                    }
                    let group = *map.entry(key).or_insert_with(|| {
                        keys.push(key);
                        next += 1;
                        next - 1
                    });
                    groups.push(group);
                }
            }
            GroupIndex::Rows {
                converter,
                map,
                keys,
                key_bytes,
            } => {
                let rows = converter.convert_columns(key_columns)?;
                groups.reserve(rows.num_rows());
                let mut next = next;
                for row in rows.iter() {
                    let bytes = row.as_ref();
                    let group = match map.get(bytes) {
                        Some(group) => *group,
                        None => {
                            *key_bytes += bytes.len();
                            let owned: Box<[u8]> = bytes.into();
                            keys.push(owned.clone());
                            map.insert(owned, next);
                            next += 1;
                            next - 1
                        }
                    };
                    groups.push(group);
                }
            }
        }
        Ok(())
    }

    /// The key columns, one row per group in group order (a null-free
    /// Int64 key is copied into memory from `spare`).
    pub fn key_columns(&self, spare: &mut SpareColumns) -> Result<Vec<ArrayRef>> {
        match self {
            GroupIndex::Int64 {
                keys, null_group, ..
            } => {
                if null_group.is_none() {
                    let mut words = spare.take(keys.len());
                    words.extend(keys.iter().map(|k| *k as u64));
                    let values = ScalarBuffer::new(spare.lend(words), 0, keys.len());
                    return Ok(vec![Arc::new(Int64Array::new(values, None))]);
                }
                // Groups are numbered in first-seen order, so the null group sits
                // at its own index among the non-null keys.
                let mut values = Vec::with_capacity(self.len());
                let mut key_iter = keys.iter();
                for group in 0..self.len() as u32 {
                    if Some(group) == *null_group {
                        values.push(None);
                    } else {
                        values.push(key_iter.next().copied());
                    }
                }
                Ok(vec![Arc::new(Int64Array::from(values))])
            }
            GroupIndex::Rows {
                converter, keys, ..
            } => {
                let parser = converter.parser();
                let rows = keys.iter().map(|k| parser.parse(k));
                Ok(converter.convert_rows(rows)?)
            }
        }
    }
}

impl GroupIndex {
    /// The key columns of `groups` only, one row per group in that order;
    /// an Int64 key's column is built in `spare`'s memory, as in
    /// [`key_columns`](Self::key_columns).
    pub fn key_columns_of(
        &self,
        groups: &[u32],
        spare: &mut SpareColumns,
    ) -> Result<Vec<ArrayRef>> {
        match self {
            GroupIndex::Int64 {
                keys, null_group, ..
            } => {
                if null_group.is_none() {
                    let mut words = spare.take(groups.len());
                    words.extend(groups.iter().map(|g| keys[*g as usize] as u64));
                    let values = ScalarBuffer::new(spare.lend(words), 0, groups.len());
                    return Ok(vec![Arc::new(Int64Array::new(values, None))]);
                }
                let key =
                    |g: u32| (Some(g) != *null_group).then(|| keys[key_place(g, *null_group)]);
                let column: Int64Array = groups.iter().map(|g| key(*g)).collect();
                Ok(vec![Arc::new(column)])
            }
            GroupIndex::Rows {
                converter, keys, ..
            } => {
                let parser = converter.parser();
                let rows = groups.iter().map(|g| parser.parse(&keys[*g as usize]));
                Ok(converter.convert_rows(rows)?)
            }
        }
    }
}

impl GroupIndex {
    /// Numbers the groups anew: group `order[i]` becomes group `i`. The
    /// keys are gathered in their new order (independent reads, which the
    /// processor overlaps) and the lookup by key is pointed at the new
    /// numbers; nothing is hashed or inserted again. `order` holds each
    /// group number once.
    pub fn renumber(&mut self, order: &[u32]) -> Result<()> {
        let missing = || Error::Internal("a group's key is missing from the group index".into());
        match self {
            GroupIndex::Int64 {
                dense,
                map,
                keys,
                null_group,
            } => {
                let null = *null_group;
                let mut renumbered = Vec::with_capacity(keys.len());
                let mut new_null = None;
                for (new, &old) in order.iter().enumerate() {
                    if Some(old) == null {
                        new_null = Some(new as u32);
                    } else {
                        renumbered.push(keys[key_place(old, null)]);
                    }
                }
                *keys = renumbered;
                *null_group = new_null;
                let groups = (0..order.len() as u32).filter(|g| Some(*g) != new_null);
                for (group, key) in groups.zip(keys.iter()) {
                    match usize::try_from(*key).ok().filter(|s| *s < dense.len()) {
                        Some(slot) => dense[slot] = group + 1,
                        None => *map.get_mut(key).ok_or_else(missing)? = group,
                    }
                }
            }
            GroupIndex::Rows { map, keys, .. } => {
                let mut old = std::mem::take(keys);
                keys.extend(order.iter().map(|g| std::mem::take(&mut old[*g as usize])));
                for (group, key) in keys.iter().enumerate() {
                    *map.get_mut(key).ok_or_else(missing)? = group as u32;
                }
            }
        }
        Ok(())
    }
}

/// Where non-null group `group`'s key sits in an Int64 index's `keys`: the
/// null group takes a number but no place there.
fn key_place(group: u32, null_group: Option<u32>) -> usize {
    group as usize - usize::from(null_group.is_some_and(|null| group > null))
}

/// Grows the direct table so that it covers `key`, when the key is
/// non-negative and the table stays dense enough; moves the map's keys that
/// the grown table covers into it. Returns whether `key` now has a slot.
fn grow_dense(
    dense: &mut Vec<u32>,
    map: &mut HashMap<i64, u32, RandomState>,
    key: i64,
    groups: usize,
) -> bool {
    let Ok(key) = usize::try_from(key) else {
        return false;
    };
    let wanted = (key + 1).next_power_of_two().max(1024);
    let allowed =
        (groups.saturating_add(1) * DENSE_SPARSITY).clamp(DENSE_MIN_SLOTS, DENSE_MAX_SLOTS);
    if wanted > allowed {
        return false;
    }
    dense.resize(wanted, 0);
    map.retain(|k, group| match usize::try_from(*k) {
        Ok(slot) if slot < wanted => {
            dense[slot] = *group + 1;
            false
        }
        _ => true,
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assign(index: &mut GroupIndex, keys: Vec<Option<i64>>) -> Vec<u32> {
        let column: ArrayRef = Arc::new(Int64Array::from(keys));
        let mut groups = Vec::new();
        index.assign(&[column], &mut groups).unwrap();
        groups
    }

    #[test]
    fn direct_and_hashed_keys_share_one_numbering() {
        let mut index = GroupIndex::new(&[DataType::Int64]).unwrap();
        // Small keys, a huge one, a negative one, a null, and repeats.
        let first = assign(
            &mut index,
            vec![
                Some(3),
                Some(1 << 40),
                Some(-5),
                None,
                Some(3),
                Some(70_000),
            ],
        );
        assert_eq!(first, vec![0, 1, 2, 3, 0, 4]);
        // A key that first went to the map (70_000, beyond the first table)
        // keeps its group when the table grows over it.
        let keys: Vec<Option<i64>> = (0..200_000).map(Some).collect();
        let second = assign(&mut index, keys);
        assert_eq!(second[3], 0);
        assert_eq!(second[70_000], 4);
        assert_eq!(second[0], 5);
        assert_eq!(
            assign(&mut index, vec![Some(1 << 40), Some(-5), None]),
            vec![1, 2, 3]
        );
        let columns = index.key_columns(&mut SpareColumns::default()).unwrap();
        let keys = columns[0].as_primitive::<Int64Type>();
        assert_eq!(keys.len(), index.len());
        assert_eq!(keys.value(1), 1 << 40);
        assert!(keys.is_null(3));
        assert_eq!(keys.value(5), 0);
    }

    #[test]
    fn renumbered_groups_keep_their_keys_under_the_new_numbers() {
        use arrow::array::{StringArray, UInt32Array};
        // Direct, hashed, negative and null keys; then string keys.
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(3),
            Some(1 << 40),
            None,
            Some(-5),
            Some(70_000),
            Some(0),
        ]));
        let strings: ArrayRef = Arc::new(StringArray::from(vec![
            Some("c"),
            None,
            Some("a"),
            Some(""),
            Some("b"),
            Some("zz"),
        ]));
        for (keys, data_type) in [(ints, DataType::Int64), (strings, DataType::Utf8)] {
            let mut index = GroupIndex::new(&[data_type]).unwrap();
            let mut groups = Vec::new();
            index
                .assign(std::slice::from_ref(&keys), &mut groups)
                .unwrap();
            assert_eq!(groups, vec![0, 1, 2, 3, 4, 5]);
            let order = [4, 2, 5, 0, 3, 1];
            index.renumber(&order).unwrap();
            // Each key now has the number of its place in `order`.
            index
                .assign(std::slice::from_ref(&keys), &mut groups)
                .unwrap();
            assert_eq!(groups, vec![3, 5, 1, 4, 0, 2], "{}", keys.data_type());
            assert_eq!(index.len(), 6, "no group added");
            let columns = index.key_columns(&mut SpareColumns::default()).unwrap();
            let reordered =
                arrow::compute::take(&keys, &UInt32Array::from(order.to_vec()), None).unwrap();
            assert_eq!(&columns[0], &reordered);
        }
    }
}
