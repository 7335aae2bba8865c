//! Maps the key columns of each row to a dense group number.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, SortField};
use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::error::Result;

/// Group numbers for key values. A single non-dictionary Int64 key (the
/// common case) avoids row encoding; any other key goes through Arrow's row format.
pub(crate) enum GroupIndex {
    Int64 {
        map: HashMap<i64, u32, RandomState>,
        keys: Vec<i64>,
        null_group: Option<u32>,
    },
    Rows {
        converter: RowConverter,
        map: HashMap<Box<[u8]>, u32, RandomState>,
        keys: Vec<Box<[u8]>>,
    },
}

impl GroupIndex {
    pub fn new(key_types: &[DataType]) -> Result<Self> {
        Ok(if key_types == [DataType::Int64] {
            GroupIndex::Int64 {
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

    /// Writes the group number of every row into `groups`, adding new groups.
    pub fn assign(&mut self, key_columns: &[ArrayRef], groups: &mut Vec<u32>) -> Result<()> {
        groups.clear();
        let next = self.len() as u32;
        match self {
            GroupIndex::Int64 {
                map,
                keys,
                null_group,
            } => {
                let column = key_columns[0].as_primitive::<Int64Type>();
                groups.reserve(column.len());
                let mut next = next;
                for (i, key) in column.values().iter().enumerate() {
                    let group = if column.is_null(i) {
                        *null_group.get_or_insert_with(|| {
                            next += 1;
                            next - 1
                        })
                    } else {
                        *map.entry(*key).or_insert_with(|| {
                            keys.push(*key);
                            next += 1;
                            next - 1
                        })
                    };
                    groups.push(group);
                }
            }
            GroupIndex::Rows {
                converter,
                map,
                keys,
            } => {
                let rows = converter.convert_columns(key_columns)?;
                groups.reserve(rows.num_rows());
                let mut next = next;
                for row in rows.iter() {
                    let bytes = row.as_ref();
                    let group = match map.get(bytes) {
                        Some(group) => *group,
                        None => {
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

    /// The key columns, one row per group in group order.
    pub fn key_columns(&self) -> Result<Vec<ArrayRef>> {
        match self {
            GroupIndex::Int64 {
                keys, null_group, ..
            } => {
                if null_group.is_none() {
                    return Ok(vec![Arc::new(Int64Array::new(keys.clone().into(), None))]);
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
