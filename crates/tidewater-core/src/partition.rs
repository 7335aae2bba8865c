//! Hash partitioning: which downstream subtask each row goes to.
//!
//! The hash is seeded with a constant, so a key maps to the same subtask in
//! every process: keyed state checkpointed by subtask i is restored into the
//! subtask that will receive that key again.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::*;
use foldhash::fast::FixedState;

use crate::error::{Error, Result};

const PARTITION_SEED: u64 = 0x7469_6465_7761_7465; // "tidewate"
const NULL_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

fn hasher() -> FixedState {
    FixedState::with_seed(PARTITION_SEED)
}

macro_rules! hash_primitive {
    ($array:expr, $t:ty, $hashes:expr, $first:expr, $state:expr) => {{
        let array = $array.as_primitive::<$t>();
        for (i, (h, v)) in $hashes.iter_mut().zip(array.values().iter()).enumerate() {
            let value = if array.is_null(i) {
                NULL_HASH
            } else {
                $state.hash_one(v.to_bits_for_hash())
            };
            *h = if $first {
                value
            } else {
                $state.hash_one((*h, value))
            };
        }
    }};
}

/// Gives hashable bits for a primitive value (floats by their bit pattern).
trait ToBitsForHash {
    fn to_bits_for_hash(&self) -> u64;
}

macro_rules! bits_as_int {
    ($($t:ty),*) => {$(impl ToBitsForHash for $t {
        fn to_bits_for_hash(&self) -> u64 { *self as u64 }
    })*};
}
bits_as_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl ToBitsForHash for f32 {
    fn to_bits_for_hash(&self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl ToBitsForHash for f64 {
    fn to_bits_for_hash(&self) -> u64 {
        self.to_bits()
    }
}

/// Fills `hashes` with one hash per row over `columns`.
pub fn hash_columns(columns: &[&ArrayRef], hashes: &mut Vec<u64>) -> Result<()> {
    let rows = columns.first().map_or(0, |c| c.len());
    hashes.clear();
    hashes.resize(rows, 0);
    let state = hasher();
    for (n, column) in columns.iter().enumerate() {
        let first = n == 0;
        match column.data_type() {
            DataType::Int8 => hash_primitive!(column, Int8Type, hashes, first, state),
            DataType::Int16 => hash_primitive!(column, Int16Type, hashes, first, state),
            DataType::Int32 => hash_primitive!(column, Int32Type, hashes, first, state),
            DataType::Int64 => hash_primitive!(column, Int64Type, hashes, first, state),
            DataType::UInt8 => hash_primitive!(column, UInt8Type, hashes, first, state),
            DataType::UInt16 => hash_primitive!(column, UInt16Type, hashes, first, state),
            DataType::UInt32 => hash_primitive!(column, UInt32Type, hashes, first, state),
            DataType::UInt64 => hash_primitive!(column, UInt64Type, hashes, first, state),
            DataType::Float32 => hash_primitive!(column, Float32Type, hashes, first, state),
            DataType::Float64 => hash_primitive!(column, Float64Type, hashes, first, state),
            DataType::Date32 => hash_primitive!(column, Date32Type, hashes, first, state),
            DataType::Date64 => hash_primitive!(column, Date64Type, hashes, first, state),
            DataType::Timestamp(TimeUnit::Second, _) => {
                hash_primitive!(column, TimestampSecondType, hashes, first, state)
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                hash_primitive!(column, TimestampMillisecondType, hashes, first, state)
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                hash_primitive!(column, TimestampMicrosecondType, hashes, first, state)
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                hash_primitive!(column, TimestampNanosecondType, hashes, first, state)
            }
            DataType::Utf8 => hash_bytes(column.as_string::<i32>().iter(), hashes, first),
            DataType::LargeUtf8 => hash_bytes(column.as_string::<i64>().iter(), hashes, first),
            DataType::Utf8View => hash_bytes(column.as_string_view().iter(), hashes, first),
            DataType::Binary => hash_bytes(column.as_binary::<i32>().iter(), hashes, first),
            DataType::LargeBinary => hash_bytes(column.as_binary::<i64>().iter(), hashes, first),
            DataType::Boolean => {
                let array = column.as_boolean();
                for (h, v) in hashes.iter_mut().zip(array.iter()) {
                    let value = v.map_or(NULL_HASH, |b| state.hash_one(b));
                    *h = if first {
                        value
                    } else {
                        state.hash_one((*h, value))
                    };
                }
            }
            other => {
                return Err(Error::BadInput(format!(
                    "key_by: cannot partition by a column of type {other}; \
                     key by integer, floating-point, date, timestamp, string, binary or boolean columns"
                )));
            }
        }
    }
    Ok(())
}

fn hash_bytes<'a, T, I>(values: I, hashes: &mut [u64], first: bool)
where
    T: AsRef<[u8]> + ?Sized + 'a,
    I: Iterator<Item = Option<&'a T>>,
{
    let state = hasher();
    for (h, v) in hashes.iter_mut().zip(values) {
        let value = v.map_or(NULL_HASH, |b| state.hash_one(b.as_ref()));
        *h = if first {
            value
        } else {
            state.hash_one((*h, value))
        };
    }
}

/// Splits a batch by the hash of its key columns into `partitions` batches
/// (empty ones are `None`). `scratch` is reused across calls.
pub fn partition_batch(
    batch: &RecordBatch,
    key_indices: &[usize],
    partitions: usize,
    scratch: &mut Vec<u64>,
) -> Result<Vec<Option<RecordBatch>>> {
    let columns: Vec<&ArrayRef> = key_indices.iter().map(|i| batch.column(*i)).collect();
    hash_columns(&columns, scratch)?;
    let mut indices: Vec<Vec<u32>> = (0..partitions)
        .map(|_| Vec::with_capacity(batch.num_rows() / partitions + 16))
        .collect();
    // `hash % partitions` decides where a key's state lives, so it must not
    // change; a mask computes the same for a power of two without a
    // division per row.
    if partitions.is_power_of_two() {
        let mask = partitions as u64 - 1;
        for (row, hash) in scratch.iter().enumerate() {
            indices[(*hash & mask) as usize].push(row as u32);
        }
    } else {
        for (row, hash) in scratch.iter().enumerate() {
            indices[(*hash % partitions as u64) as usize].push(row as u32);
        }
    }
    indices
        .into_iter()
        .map(|rows| {
            if rows.is_empty() {
                Ok(None)
            } else if rows.len() == batch.num_rows() {
                Ok(Some(batch.clone()))
            } else {
                let rows = Arc::new(UInt32Array::from(rows)) as ArrayRef;
                Ok(Some(take_record_batch(
                    batch,
                    rows.as_primitive::<UInt32Type>(),
                )?))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};

    use super::*;

    #[test]
    fn equal_keys_go_to_the_same_partition_and_no_row_is_lost() {
        let ids: Vec<i64> = (0..10_000).collect();
        let keys: Vec<i64> = ids.iter().map(|i| i % 97).collect();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("k", Arc::new(Int64Array::from(keys)) as ArrayRef),
        ])
        .unwrap();
        let parts = partition_batch(&batch, &[1], 3, &mut Vec::new()).unwrap();
        let mut owner = std::collections::HashMap::new();
        let mut total = 0;
        for (p, part) in parts.iter().enumerate() {
            let part = part.as_ref().unwrap();
            total += part.num_rows();
            for k in part.column(1).as_primitive::<Int64Type>().values() {
                assert_eq!(
                    *owner.entry(*k).or_insert(p),
                    p,
                    "key {k} in two partitions"
                );
            }
        }
        assert_eq!(total, 10_000);
        assert_eq!(owner.len(), 97);
    }

    #[test]
    fn every_parallelism_places_a_row_at_its_hash_modulo_p() {
        // Restored keyed state sits where `hash % p` put it: the power-of-two
        // shortcut must agree.
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let batch = RecordBatch::try_from_iter([("k", keys.clone())]).unwrap();
        let mut hashes = Vec::new();
        hash_columns(&[&keys], &mut hashes).unwrap();
        for p in [2usize, 3, 4, 8] {
            let parts = partition_batch(&batch, &[0], p, &mut Vec::new()).unwrap();
            for (at, part) in parts.iter().enumerate() {
                for k in part
                    .as_ref()
                    .unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                {
                    assert_eq!(hashes[*k as usize] % p as u64, at as u64, "key {k}, p {p}");
                }
            }
        }
    }

    #[test]
    fn hashes_are_stable_across_processes() {
        // A changed hash would send restored keyed state to the wrong subtask.
        let column: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
        let mut hashes = Vec::new();
        hash_columns(&[&column], &mut hashes).unwrap();
        let again = hashes.clone();
        hash_columns(&[&column], &mut hashes).unwrap();
        assert_eq!(hashes, again);
        assert_ne!(hashes[0], hashes[1]);
    }
}
