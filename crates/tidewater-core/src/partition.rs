//! Hash partitioning: which downstream subtask each row goes to.
//!
//! Keyed state checkpointed by subtask i is restored into subtask i, so a
//! key must reach the same subtask in every process, build and machine. The
//! hash is therefore a specified function, not whatever a hasher crate does
//! today: [`PARTITIONER_NAME`] (XXH3-64, whose output is fixed by its published
//! specification) over a canonical byte encoding of each key value.
//!
//! The canonical encoding of one value:
//!
//! | type | bytes |
//! |---|---|
//! | signed integers, dates, timestamps | the value as an `i64`, 8 bytes little-endian |
//! | unsigned integers | the value as a `u64`, 8 bytes little-endian |
//! | floats | the value as an `f64` with `-0.0` as `0.0` and every NaN as `0x7ff8000000000000`, its bits as 8 bytes little-endian |
//! | strings (UTF-8), binary | the length as a `u64`, 8 bytes little-endian, then the bytes |
//! | booleans | one byte, 0 or 1 |
//! | null | no bytes |
//!
//! A row keyed by one column hashes to `XXH3-64(seed, enc(v))`; each further
//! key column chains: `h = XXH3-64(seed, le64(h) ++ enc(v))`. The seed is
//! [`SEED`].
//!
//! A row's **key group** is `h % G`, where `G`, the job's key group count,
//! is chosen when the job first starts and recorded in its manifest (Flink's
//! max-parallelism). Subtask `s` of `p` owns the contiguous groups
//! `[ceil(s·G/p), ceil((s+1)·G/p))`, so group `g` goes to subtask
//! `g·p / G` ([`KeyGroups`]). Keyed state therefore splits along key groups
//! when a restore changes the parallelism. The values are pinned by golden
//! unit tests; changing any of this is a new partitioner version, which a
//! restore of keyed state that cannot be split again refuses (see
//! [`PartitionerId`]).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::*;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

use crate::error::{Error, Result};

/// The seed of the partition hash ("tidewate" in ASCII).
pub const SEED: u64 = 0x7469_6465_7761_7465;

/// A partitioner's identity, recorded in every manifest: keyed state written
/// under one partitioner is misplaced under another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionerId {
    /// The algorithm and encoding family, e.g. `xxh3-64`.
    pub name: String,
    /// Bumped whenever the encoding, seed or placement rule changes.
    pub version: u32,
}

impl std::fmt::Display for PartitionerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} version {}", self.name, self.version)
    }
}

/// The name of the partitioner this build uses.
pub const PARTITIONER_NAME: &str = "xxh3-64";
/// The version of the partitioner this build uses. Version 1 placed a row
/// at `h % parallelism`; version 2 places it by its key group.
pub const PARTITIONER_VERSION: u32 = 2;

/// The key group count of a job that does not choose one.
pub const DEFAULT_KEY_GROUPS: u32 = 4096;

/// The most key groups a job may have (and so the most subtasks a keyed
/// operator may run).
pub const MAX_KEY_GROUPS: u32 = 32_768;

/// A job's key groups and which subtask owns each: the placement rule of
/// the module documentation, as a table (one entry per group), so that
/// routing a row costs a lookup.
///
/// ```
/// use tidewater_core::partition::KeyGroups;
///
/// let groups = KeyGroups::new(8, 3).unwrap();
/// assert_eq!(groups.owned_by(0), 0..3);
/// assert_eq!(groups.owned_by(1), 3..6);
/// assert_eq!(groups.owned_by(2), 6..8);
/// assert_eq!(groups.owner_of_hash(13), 1); // 13 % 8 = group 5
/// ```
#[derive(Debug, Clone)]
pub struct KeyGroups {
    count: u32,
    parallelism: usize,
    owners: Arc<[u16]>,
}

impl KeyGroups {
    /// `count` groups over `parallelism` subtasks; refused when a subtask
    /// would own no group, or the count is out of range.
    pub fn new(count: u32, parallelism: usize) -> Result<Self> {
        check_key_groups(count, parallelism)?;
        let owners = (0..count)
            .map(|g| (u64::from(g) * parallelism as u64 / u64::from(count)) as u16)
            .collect();
        Ok(KeyGroups {
            count,
            parallelism,
            owners,
        })
    }

    /// How many groups there are.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// How many subtasks own them.
    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The group of a key hash.
    #[inline(always)]
    pub fn group_of(&self, hash: u64) -> u32 {
        (hash % u64::from(self.count)) as u32
    }

    /// The subtask that owns the key of a hash.
    #[inline(always)]
    pub fn owner_of_hash(&self, hash: u64) -> usize {
        usize::from(self.owners[self.group_of(hash) as usize])
    }

    /// The subtask that owns key group `group` (below [`count`](Self::count)).
    pub(crate) fn owner_of_group(&self, group: u32) -> u16 {
        self.owners[group as usize]
    }

    /// The groups subtask `subtask` owns.
    pub fn owned_by(&self, subtask: usize) -> std::ops::Range<u32> {
        let (g, p) = (u64::from(self.count), self.parallelism as u64);
        let start = |s: u64| (s * g).div_ceil(p) as u32;
        start(subtask as u64)..start(subtask as u64 + 1)
    }
}

/// How a task's one hash-partitioned edge routes rows: by the key groups
/// of `columns`, spread over the downstream subtasks as `groups` says.
///
/// An operator at the end of such a task that already knows each key's
/// subtask (the pre-aggregation works it out once per key, not once per
/// hand-on) can emit batches routed whole to one subtask, and the edge
/// sends them on without hashing or splitting them.
#[derive(Debug, Clone)]
pub(crate) struct KeyRouting {
    /// The key columns, by name, as the edge reads them.
    pub columns: Vec<String>,
    /// The job's key groups over the downstream subtasks.
    pub groups: KeyGroups,
}

/// Whether `count` key groups can be spread over `parallelism` subtasks.
pub fn check_key_groups(count: u32, parallelism: usize) -> Result<()> {
    if count == 0 || count > MAX_KEY_GROUPS {
        return Err(Error::InvalidConfig(format!(
            "key_groups = {count}: a job has between 1 and {MAX_KEY_GROUPS} key groups \
             (the default is {DEFAULT_KEY_GROUPS})"
        )));
    }
    if parallelism == 0 || parallelism > count as usize {
        return Err(Error::InvalidConfig(format!(
            "a keyed operator cannot run {parallelism} subtasks over the job's {count} key \
             groups: keyed state is split by key group, so the parallelism may be at most the \
             key group count, which is fixed when the job first starts; lower the parallelism, \
             or start a new job (another name or state location) with more key groups"
        )));
    }
    Ok(())
}

/// The key group count a run uses: the one its checkpoint recorded (fixed
/// once a checkpoint has it: another count would move keys between
/// groups), else the configured one.
pub fn key_groups_for_run(recorded: Option<u32>, configured: u32) -> u32 {
    recorded.unwrap_or(configured)
}

/// The partitioner this build uses.
///
/// ```
/// use tidewater_core::partition::partitioner;
///
/// assert_eq!(partitioner().to_string(), "xxh3-64 version 2");
/// ```
pub fn partitioner() -> PartitionerId {
    PartitionerId {
        name: PARTITIONER_NAME.to_string(),
        version: PARTITIONER_VERSION,
    }
}

#[inline(always)]
fn xxh3(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot_with_seed(SEED, bytes)
}

/// Hashes 8 encoded bytes as the first key column, or chained after `previous`.
#[inline(always)]
fn hash_word(previous: Option<u64>, word: [u8; 8]) -> u64 {
    match previous {
        None => xxh3(&word),
        Some(h) => {
            let mut buffer = [0u8; 16];
            buffer[..8].copy_from_slice(&h.to_le_bytes());
            buffer[8..].copy_from_slice(&word);
            xxh3(&buffer)
        }
    }
}

/// The hash of a null in a column: no bytes, chained like any other value.
fn hash_null(previous: Option<u64>) -> u64 {
    match previous {
        None => xxh3(&[]),
        Some(h) => xxh3(&h.to_le_bytes()),
    }
}

/// The canonical 8 bytes of a float (`-0.0` is `0.0`, every NaN is one NaN).
#[inline(always)]
fn float_word(value: f64) -> [u8; 8] {
    let canonical = if value.is_nan() {
        0x7ff8_0000_0000_0000
    } else if value == 0.0 {
        0
    } else {
        value.to_bits()
    };
    canonical.to_le_bytes()
}

/// Hashes a fixed-width column whose values encode to 8 bytes each.
fn hash_fixed<T: ArrowPrimitiveType>(
    array: &PrimitiveArray<T>,
    hashes: &mut [u64],
    first: bool,
    word: impl Fn(T::Native) -> [u8; 8],
) {
    let values = array.values().iter();
    match (array.nulls(), first) {
        (None, true) => {
            for (h, v) in hashes.iter_mut().zip(values) {
                *h = hash_word(None, word(*v));
            }
        }
        (None, false) => {
            for (h, v) in hashes.iter_mut().zip(values) {
                *h = hash_word(Some(*h), word(*v));
            }
        }
        (Some(nulls), _) => {
            for (i, (h, v)) in hashes.iter_mut().zip(values).enumerate() {
                let previous = (!first).then_some(*h);
                *h = if nulls.is_null(i) {
                    hash_null(previous)
                } else {
                    hash_word(previous, word(*v))
                };
            }
        }
    }
}

macro_rules! signed {
    ($column:expr, $t:ty, $hashes:expr, $first:expr) => {
        hash_fixed($column.as_primitive::<$t>(), $hashes, $first, |v| {
            (v as i64).to_le_bytes()
        })
    };
}

macro_rules! unsigned {
    ($column:expr, $t:ty, $hashes:expr, $first:expr) => {
        hash_fixed($column.as_primitive::<$t>(), $hashes, $first, |v| {
            (v as u64).to_le_bytes()
        })
    };
}

/// Hashes a column of strings or byte strings: length, then bytes.
fn hash_bytes<'a, T, I>(values: I, hashes: &mut [u64], first: bool)
where
    T: AsRef<[u8]> + ?Sized + 'a,
    I: Iterator<Item = Option<&'a T>>,
{
    let mut buffer = Vec::with_capacity(64);
    for (h, v) in hashes.iter_mut().zip(values) {
        let previous = (!first).then_some(*h);
        let Some(v) = v else {
            *h = hash_null(previous);
            continue;
        };
        let bytes = v.as_ref();
        buffer.clear();
        if let Some(previous) = previous {
            buffer.extend_from_slice(&previous.to_le_bytes());
        }
        buffer.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        buffer.extend_from_slice(bytes);
        *h = xxh3(&buffer);
    }
}

/// Whether rows can be partitioned by a column of `data_type`.
pub fn can_partition_by(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
            | DataType::Date32
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::Boolean
    )
}

/// Fills `hashes` with one hash per row over `columns`, as the module
/// documentation specifies.
pub fn hash_columns(columns: &[&ArrayRef], hashes: &mut Vec<u64>) -> Result<()> {
    let rows = columns.first().map_or(0, |c| c.len());
    hashes.clear();
    hashes.resize(rows, 0);
    for (n, column) in columns.iter().enumerate() {
        let first = n == 0;
        let h = hashes.as_mut_slice();
        match column.data_type() {
            DataType::Int8 => signed!(column, Int8Type, h, first),
            DataType::Int16 => signed!(column, Int16Type, h, first),
            DataType::Int32 => signed!(column, Int32Type, h, first),
            DataType::Int64 => signed!(column, Int64Type, h, first),
            DataType::UInt8 => unsigned!(column, UInt8Type, h, first),
            DataType::UInt16 => unsigned!(column, UInt16Type, h, first),
            DataType::UInt32 => unsigned!(column, UInt32Type, h, first),
            DataType::UInt64 => unsigned!(column, UInt64Type, h, first),
            DataType::Float32 => hash_fixed(column.as_primitive::<Float32Type>(), h, first, |v| {
                float_word(f64::from(v))
            }),
            DataType::Float64 => {
                hash_fixed(column.as_primitive::<Float64Type>(), h, first, float_word)
            }
            DataType::Date32 => signed!(column, Date32Type, h, first),
            DataType::Date64 => signed!(column, Date64Type, h, first),
            DataType::Timestamp(TimeUnit::Second, _) => {
                signed!(column, TimestampSecondType, h, first)
            }
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                signed!(column, TimestampMillisecondType, h, first)
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                signed!(column, TimestampMicrosecondType, h, first)
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                signed!(column, TimestampNanosecondType, h, first)
            }
            DataType::Utf8 => hash_bytes(column.as_string::<i32>().iter(), h, first),
            DataType::LargeUtf8 => hash_bytes(column.as_string::<i64>().iter(), h, first),
            DataType::Utf8View => hash_bytes(column.as_string_view().iter(), h, first),
            DataType::Binary => hash_bytes(column.as_binary::<i32>().iter(), h, first),
            DataType::LargeBinary => hash_bytes(column.as_binary::<i64>().iter(), h, first),
            DataType::BinaryView => hash_bytes(column.as_binary_view().iter(), h, first),
            DataType::Boolean => {
                let array = column.as_boolean();
                for (h, v) in h.iter_mut().zip(array.iter()) {
                    let previous = (!first).then_some(*h);
                    *h = match v {
                        None => hash_null(previous),
                        Some(b) => match previous {
                            None => xxh3(&[u8::from(b)]),
                            Some(p) => {
                                let mut buffer = [0u8; 9];
                                buffer[..8].copy_from_slice(&p.to_le_bytes());
                                buffer[8] = u8::from(b);
                                xxh3(&buffer)
                            }
                        },
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

/// Splits a batch by the key groups of its key columns into one batch per
/// subtask of `groups` (empty ones are `None`). `scratch` is reused across
/// calls.
pub fn partition_batch(
    batch: &RecordBatch,
    key_indices: &[usize],
    groups: &KeyGroups,
    scratch: &mut Vec<u64>,
) -> Result<Vec<Option<RecordBatch>>> {
    let columns: Vec<&ArrayRef> = key_indices.iter().map(|i| batch.column(*i)).collect();
    hash_columns(&columns, scratch)?;
    let partitions = groups.parallelism();
    let mut indices: Vec<Vec<u32>> = (0..partitions)
        .map(|_| Vec::with_capacity(batch.num_rows() / partitions + 16))
        .collect();
    // A mask computes `hash % count` for a power of two without a division
    // per row; the owner table does the rest.
    if groups.count.is_power_of_two() {
        let mask = u64::from(groups.count) - 1;
        for (row, hash) in scratch.iter().enumerate() {
            let owner = groups.owners[(*hash & mask) as usize];
            indices[usize::from(owner)].push(row as u32);
        }
    } else {
        for (row, hash) in scratch.iter().enumerate() {
            indices[groups.owner_of_hash(*hash)].push(row as u32);
        }
    }
    take_parts(batch, indices)
}

/// One batch per list of rows of `batch` (`None` for an empty list).
pub(crate) fn take_parts(
    batch: &RecordBatch,
    indices: Vec<Vec<u32>>,
) -> Result<Vec<Option<RecordBatch>>> {
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

    #[test]
    fn a_recorded_key_group_count_wins_over_the_configured_one() {
        for (recorded, configured, used) in [
            (None, 4096, 4096),
            (Some(4096), 4096, 4096),
            (Some(128), 4096, 128),
            (Some(4096), 3, 4096),
        ] {
            assert_eq!(key_groups_for_run(recorded, configured), used);
        }
    }

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
        let groups = KeyGroups::new(DEFAULT_KEY_GROUPS, 3).unwrap();
        let parts = partition_batch(&batch, &[1], &groups, &mut Vec::new()).unwrap();
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
    fn every_parallelism_places_a_row_with_the_owner_of_its_key_group() {
        // Restored keyed state is split by `owned_by`: the routing table
        // and the power-of-two shortcut must agree with it.
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let batch = RecordBatch::try_from_iter([("k", keys.clone())]).unwrap();
        let mut hashes = Vec::new();
        hash_columns(&[&keys], &mut hashes).unwrap();
        for (count, p) in [(4096, 2usize), (4096, 3), (100, 3), (7, 7), (1, 1)] {
            let groups = KeyGroups::new(count, p).unwrap();
            let parts = partition_batch(&batch, &[0], &groups, &mut Vec::new()).unwrap();
            for (at, part) in parts.iter().enumerate() {
                let owned = groups.owned_by(at);
                for k in part
                    .iter()
                    .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                {
                    let group = (hashes[k as usize] % u64::from(count)) as u32;
                    assert!(owned.contains(&group), "key {k}, {count} groups, p {p}");
                }
            }
        }
    }

    #[test]
    fn key_group_ranges_are_contiguous_cover_every_group_and_are_never_empty() {
        for (count, p) in [
            (4096, 1usize),
            (4096, 2),
            (4096, 3),
            (4096, 7),
            (10, 10),
            (10, 3),
        ] {
            let groups = KeyGroups::new(count, p).unwrap();
            let mut next = 0;
            for s in 0..p {
                let range = groups.owned_by(s);
                assert_eq!(range.start, next, "{count} groups, p {p}, subtask {s}");
                assert!(!range.is_empty(), "{count} groups, p {p}, subtask {s}");
                for g in range.clone() {
                    assert_eq!(usize::from(groups.owners[g as usize]), s);
                }
                next = range.end;
            }
            assert_eq!(next, count);
        }
    }

    #[test]
    fn key_group_counts_out_of_range_are_refused() {
        for (count, p, says) in [
            (0, 1, "between 1 and 32768"),
            (40_000, 1, "between 1 and 32768"),
            (4, 5, "at most the key group count"),
            (4, 0, "at most the key group count"),
        ] {
            let error = KeyGroups::new(count, p).unwrap_err().to_string();
            assert!(error.contains(says), "{count}, {p}: {error}");
        }
    }

    fn hash_of(columns: &[ArrayRef]) -> Vec<u64> {
        let refs: Vec<&ArrayRef> = columns.iter().collect();
        let mut hashes = Vec::new();
        hash_columns(&refs, &mut hashes).unwrap();
        hashes
    }

    /// Golden values: computed once with the reference XXH3 implementation
    /// (the `xxhash` Python package, libxxhash 0.8) over the documented
    /// encoding, and written here. A failure means keyed state restored by
    /// this build would land in other subtasks than where it was written:
    /// never update these values, bump the partitioner's version instead.
    #[test]
    fn golden_hashes_per_key_type() {
        use arrow::array::{
            BooleanArray, Date32Array, Float32Array, Float64Array, Int32Array, LargeStringArray,
            StringViewArray, TimestampMicrosecondArray, UInt64Array,
        };
        let ints = hash_of(&[Arc::new(Int64Array::from(vec![
            0,
            1,
            -1,
            42,
            i64::MAX,
            i64::MIN,
        ]))]);
        assert_eq!(
            ints,
            [
                0x2d6c_a05c_ffbb_c986,
                0x8de8_cc49_fc25_f7d7,
                0xc378_37a2_af52_b3b6,
                0xe994_494a_f40a_7d9e,
                0x3f73_90e6_9da6_9bb2,
                0x86e8_4da2_9a66_d886,
            ]
        );
        // Narrower integers, dates and timestamps widen to i64 first.
        assert_eq!(
            hash_of(&[Arc::new(Int32Array::from(vec![42, -1]))]),
            [ints[3], ints[2]]
        );
        assert_eq!(hash_of(&[Arc::new(Date32Array::from(vec![1]))]), [ints[1]]);
        assert_eq!(
            hash_of(&[Arc::new(TimestampMicrosecondArray::from(vec![42]))]),
            [ints[3]]
        );
        assert_eq!(
            hash_of(&[Arc::new(UInt64Array::from(vec![u64::MAX]))]),
            [0xc378_37a2_af52_b3b6]
        );
        // Floats: -0.0 is 0.0, every NaN is one NaN, f32 widens to f64.
        let floats = hash_of(&[Arc::new(Float64Array::from(vec![
            0.0,
            -0.0,
            1.5,
            -2.25,
            f64::NAN,
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
        ]))]);
        assert_eq!(
            floats,
            [
                0x2d6c_a05c_ffbb_c986,
                0x2d6c_a05c_ffbb_c986,
                0xb72f_af8e_4343_2174,
                0x1b1c_924a_c861_3819,
                0xf233_93cd_4a71_73f1,
                0xf233_93cd_4a71_73f1,
                0xf233_93cd_4a71_73f1,
            ]
        );
        assert_eq!(
            hash_of(&[Arc::new(Float32Array::from(vec![1.5, f32::NAN]))]),
            [floats[2], floats[4]]
        );
        // Strings: length then UTF-8 bytes, whatever the Arrow layout.
        let strings = ["", "a", "tidewater", "\u{fc}"];
        let golden = [
            0x2d6c_a05c_ffbb_c986,
            0xac74_8dd2_c6e7_5e5e,
            0xf6e4_65e6_c2b2_870a,
            0x6e81_510e_07ef_753d,
        ];
        assert_eq!(
            hash_of(&[Arc::new(StringArray::from(strings.to_vec()))]),
            golden
        );
        assert_eq!(
            hash_of(&[Arc::new(LargeStringArray::from(strings.to_vec()))]),
            golden
        );
        assert_eq!(
            hash_of(&[Arc::new(StringViewArray::from(strings.to_vec()))]),
            golden
        );
        assert_eq!(
            hash_of(&[Arc::new(BooleanArray::from(vec![false, true]))]),
            [0xd06d_a3c6_a277_d809, 0xaa15_7c24_31b6_3285]
        );
        // A null is no bytes.
        assert_eq!(
            hash_of(&[Arc::new(Int64Array::from(vec![None, Some(0)]))]),
            [0xc483_ef8b_5970_4ac3, ints[0]]
        );
    }

    #[test]
    fn golden_hashes_of_several_key_columns_chain() {
        use arrow::array::BooleanArray;
        let first: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None, Some(7), Some(7)]));
        let second: ArrayRef = Arc::new(StringArray::from(vec!["x", "x", "x", "x"]));
        assert_eq!(hash_of(&[first.clone(), second])[0], 0x176a_7e38_c591_9f96);
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), Some(3), None, Some(3)]));
        let chained = hash_of(&[first.clone(), ints]);
        assert_eq!(chained[1], 0x4e9d_a07b_cda1_5b49, "null, then 3");
        assert_eq!(chained[2], 0x021f_7b08_5c5c_541c, "7, then null");
        let bools: ArrayRef = Arc::new(BooleanArray::from(vec![true; 4]));
        assert_eq!(hash_of(&[first, bools])[0], 0x3a6e_8154_10fb_34df);
    }

    #[test]
    fn golden_placement_of_small_keys() {
        // (key, key group of 4096, subtask at p = 2, subtask at p = 3), from
        // the golden hashes (the reference implementation's, as above).
        let golden = [
            (0, 2438, 1, 1),
            (1, 2007, 0, 1),
            (2, 1410, 0, 1),
            (3, 3998, 1, 2),
            (4, 3277, 1, 2),
            (5, 1703, 0, 1),
            (6, 2769, 1, 2),
            (7, 4056, 1, 2),
        ];
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(0..8));
        let mut hashes = Vec::new();
        hash_columns(&[&keys], &mut hashes).unwrap();
        let batch = RecordBatch::try_from_iter([("k", keys)]).unwrap();
        for (p, pick) in [(2usize, 2usize), (3, 3)] {
            let groups = KeyGroups::new(DEFAULT_KEY_GROUPS, p).unwrap();
            let parts = partition_batch(&batch, &[0], &groups, &mut Vec::new()).unwrap();
            for (at, part) in parts.iter().enumerate() {
                for k in part
                    .iter()
                    .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                {
                    let (_, group, at_2, at_3) = golden[k as usize];
                    assert_eq!(groups.group_of(hashes[k as usize]), group, "key {k}");
                    assert_eq!(
                        at,
                        if pick == 2 { at_2 } else { at_3 },
                        "key {k} at p = {p}"
                    );
                }
            }
        }
    }
}
