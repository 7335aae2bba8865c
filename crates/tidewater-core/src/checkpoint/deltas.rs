//! Applying an incremental chain: a base state batch and the deltas after
//! it, one row per key, merged into the state the chain stands for.

use std::hash::Hash;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::buffer::BooleanBuffer;
use arrow::compute::{concat_batches, filter_record_batch, max, min};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use foldhash::fast::RandomState;
use hashbrown::HashSet;

use crate::error::{Error, Result};

/// The state `base` and then `deltas` (oldest first) stand for: every key's
/// newest row. The base comes as the slices it was written in (see
/// [`blob::decode_slices`](super::blob::decode_slices)), so that its
/// surviving rows are copied once, not joined first. Rows are one per key,
/// the key in the `keys` columns; a delta's row replaces the base's (or an
/// earlier delta's) row of its key. The base's surviving rows come first,
/// in their order, then the deltas'.
///
/// Only the deltas' keys are hashed, newest delta first (a key already
/// seen is an older row); the base is scanned once against them, so a
/// short chain costs little more than reading the base.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch};
/// use tidewater_core::checkpoint::deltas::apply_deltas;
///
/// let batch = |k: Vec<i64>, v: Vec<i64>| {
///     RecordBatch::try_from_iter([
///         ("k", Arc::new(Int64Array::from(k)) as _),
///         ("v", Arc::new(Int64Array::from(v)) as _),
///     ])
///     .unwrap()
/// };
/// // A base written in two slices, then one delta.
/// let base = [batch(vec![1, 2], vec![10, 20]), batch(vec![3], vec![30])];
/// let delta = batch(vec![2, 4], vec![21, 40]);
/// let state = apply_deltas(&base, &[delta], &["k".to_string()]).unwrap();
/// assert_eq!(state, batch(vec![1, 3, 2, 4], vec![10, 30, 21, 40]));
/// ```
pub fn apply_deltas(
    base: &[RecordBatch],
    deltas: &[RecordBatch],
    keys: &[String],
) -> Result<RecordBatch> {
    let Some(first) = base.first() else {
        return Err(Error::Corrupt(
            "an incremental chain's base holds no batch".into(),
        ));
    };
    let schema = first.schema();
    let deltas: Vec<&RecordBatch> = deltas.iter().filter(|d| d.num_rows() > 0).collect();
    if deltas.is_empty() {
        return Ok(concat_batches(&schema, base)?);
    }
    for delta in &deltas {
        if delta.schema().fields() != schema.fields() {
            return Err(Error::Corrupt(format!(
                "an incremental delta's columns ({}) differ from its base's ({})",
                crate::error::field_list(&delta.schema()),
                crate::error::field_list(&schema)
            )));
        }
    }
    let key_columns = |batch: &RecordBatch| -> Result<Vec<ArrayRef>> {
        keys.iter()
            .map(|key| {
                batch.column_by_name(key).cloned().ok_or_else(|| {
                    Error::Corrupt(format!(
                        "the state's key column '{key}' (Operator::state_keys) is not in the \
                         checkpointed state; its columns are {}",
                        crate::error::field_list(&batch.schema())
                    ))
                })
            })
            .collect()
    };
    let base_keys = base.iter().map(key_columns).collect::<Result<Vec<_>>>()?;
    let delta_keys = deltas
        .iter()
        .map(|d| key_columns(d))
        .collect::<Result<Vec<_>>>()?;
    let (base_kept, deltas_kept) =
        match (single_int64_key(&base_keys), single_int64_key(&delta_keys)) {
            // The common key, one Int64 column without nulls: hashed as is.
            (Some(base_keys), Some(delta_keys)) => survivors_int64(&base_keys, &delta_keys),
            _ => {
                let fields = base_keys[0]
                    .iter()
                    .map(|c| SortField::new(c.data_type().clone()))
                    .collect();
                let converter = RowConverter::new(fields)?;
                let rows = |parts: &[Vec<ArrayRef>]| {
                    parts
                        .iter()
                        .map(|k| converter.convert_columns(k))
                        .collect::<std::result::Result<Vec<Rows>, _>>()
                };
                let (base_rows, delta_rows) = (rows(&base_keys)?, rows(&delta_keys)?);
                survivors(&base_rows, &delta_rows, Rows::num_rows, |rows, i| {
                    rows.row(i).data()
                })
            }
        };
    let parts = base
        .iter()
        .zip(&base_kept)
        .chain(deltas.iter().copied().zip(&deltas_kept))
        .map(|(part, kept)| filter_record_batch(part, kept))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(concat_batches(&schema, &parts)?)
}

/// A filter mask of `len` rows, packed 64 at a time as `keep` answers for
/// each row in order.
fn mask(len: usize, keep: impl FnMut(usize) -> bool) -> BooleanArray {
    BooleanArray::new(BooleanBuffer::collect_bool(len, keep), None)
}

/// Which rows of each base part and of each delta (oldest first) hold
/// their key's newest row: a delta's row unless a later delta has its
/// key, a base row unless any delta has it. Keys are unique within the
/// base and within each delta.
fn survivors<'a, P, K: Hash + Eq>(
    base: &'a [P],
    deltas: &'a [P],
    len: impl Fn(&P) -> usize,
    key: impl Fn(&'a P, usize) -> K,
) -> (Vec<BooleanArray>, Vec<BooleanArray>) {
    let rows = deltas.iter().map(&len).sum();
    let mut seen: HashSet<K, RandomState> =
        HashSet::with_capacity_and_hasher(rows, RandomState::default());
    let mut kept: Vec<BooleanArray> = deltas
        .iter()
        .rev()
        .map(|delta| mask(len(delta), |i| seen.insert(key(delta, i))))
        .collect();
    kept.reverse();
    let base = base
        .iter()
        .map(|part| mask(len(part), |i| !seen.contains(&key(part, i))))
        .collect();
    (base, kept)
}

/// A key range up to this many bits per delta row goes in a bitmap
/// instead of a hash set (at most 8 bytes a row): keys that count from
/// zero, or any dense range, the usual integer keys.
const BITMAP_BITS_PER_ROW: u128 = 64;

/// [`survivors`] of an Int64 key: a bitmap over the deltas' key range
/// when it is dense enough, a hash set otherwise.
fn survivors_int64(
    base: &[&Int64Array],
    deltas: &[&Int64Array],
) -> (Vec<BooleanArray>, Vec<BooleanArray>) {
    let rows: usize = deltas.iter().map(|d| d.len()).sum();
    let range = deltas
        .iter()
        .filter_map(|d| Some((min(*d)?, max(*d)?)))
        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
    let Some((low, high)) = range.filter(|(low, high)| {
        (*high as i128 - *low as i128) as u128 <= rows as u128 * BITMAP_BITS_PER_ROW
    }) else {
        return survivors(base, deltas, |k| k.len(), |k, i| k.value(i));
    };
    let bit = |k: i64| (k as i128 - low as i128) as usize;
    let mut seen = vec![0u64; bit(high) / 64 + 1];
    let mut kept: Vec<BooleanArray> = deltas
        .iter()
        .rev()
        .map(|keys| {
            let keys = keys.values();
            mask(keys.len(), |i| {
                let (word, bit) = (bit(keys[i]) / 64, 1u64 << (bit(keys[i]) % 64));
                let new = seen[word] & bit == 0;
                seen[word] |= bit;
                new
            })
        })
        .collect();
    kept.reverse();
    let base = base
        .iter()
        .map(|keys| {
            let keys = keys.values();
            mask(keys.len(), |i| {
                let k = keys[i];
                !(low..=high).contains(&k) || seen[bit(k) / 64] & (1 << (bit(k) % 64)) == 0
            })
        })
        .collect();
    (base, kept)
}

/// The key columns of every part when they are one Int64 column without
/// nulls.
fn single_int64_key(parts: &[Vec<ArrayRef>]) -> Option<Vec<&Int64Array>> {
    parts
        .iter()
        .map(|keys| match keys.as_slice() {
            [key] if key.null_count() == 0 => key.as_primitive_opt::<Int64Type>(),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array, StringArray};
    use arrow::datatypes::Int64Type;

    use super::*;

    fn state(keys: &[(&str, i64)], values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "name",
                Arc::new(StringArray::from_iter_values(keys.iter().map(|k| k.0))) as _,
            ),
            (
                "n",
                Arc::new(Int64Array::from_iter_values(keys.iter().map(|k| k.1))) as _,
            ),
            ("v", Arc::new(Int64Array::from(values.to_vec())) as _),
        ])
        .unwrap()
    }

    fn rows(batch: &RecordBatch) -> Vec<(String, i64, i64)> {
        let names = batch.column(0).as_string::<i32>();
        let ns = batch.column(1).as_primitive::<Int64Type>();
        let vs = batch.column(2).as_primitive::<Int64Type>();
        (0..batch.num_rows())
            .map(|i| (names.value(i).to_string(), ns.value(i), vs.value(i)))
            .collect()
    }

    #[test]
    fn later_rows_of_a_composite_key_win() {
        let keys = ["name".to_string(), "n".to_string()];
        let base = state(&[("a", 1), ("a", 2), ("b", 1)], &[1, 2, 3]);
        let deltas = [
            state(&[("a", 2), ("c", 1)], &[20, 30]),
            state(&[], &[]),
            state(&[("c", 1), ("b", 2)], &[31, 40]),
        ];
        // The base as written in two slices, or one.
        let slices = [base.slice(0, 1), base.slice(1, 2)];
        let merged = apply_deltas(&slices, &deltas, &keys).unwrap();
        assert_eq!(
            rows(&merged),
            [
                ("a", 1, 1),
                ("b", 1, 3),
                ("a", 2, 20),
                ("c", 1, 31),
                ("b", 2, 40)
            ]
            .map(|(s, n, v)| (s.to_string(), n, v))
        );
        assert_eq!(apply_deltas(&slices, &[], &keys).unwrap(), base);
    }

    #[test]
    fn later_rows_of_an_integer_key_win_with_or_without_nulls() {
        let batch = |k: Vec<Option<i64>>, v: Vec<i64>| {
            RecordBatch::try_from_iter_with_nullable([
                ("k", Arc::new(Int64Array::from(k)) as ArrayRef, true),
                ("v", Arc::new(Int64Array::from(v)) as ArrayRef, false),
            ])
            .unwrap()
        };
        let pairs = |b: &RecordBatch| {
            let k = b.column(0).as_primitive::<Int64Type>();
            let v = b.column(1).as_primitive::<Int64Type>();
            (0..b.num_rows())
                .map(|i| (k.is_valid(i).then(|| k.value(i)), v.value(i)))
                .collect::<Vec<_>>()
        };
        // Dense keys without nulls (a bitmap), sparse ones (a hash set of
        // integers), then with a null key (as rows).
        for (scale, null) in [(1, Some(9)), (1 << 50, Some(9)), (1, None)] {
            let k = |k: i64| Some(k * scale);
            let base = batch(vec![k(1), k(2), null], vec![10, 20, 90]);
            let deltas = [
                batch(vec![k(2), k(4), null], vec![21, 40, 91]),
                batch(vec![k(4), k(5)], vec![41, 50]),
            ];
            let slices = [base.slice(0, 2), base.slice(2, 1)];
            let merged = apply_deltas(&slices, &deltas, &["k".into()]).unwrap();
            assert_eq!(
                pairs(&merged),
                [(k(1), 10), (k(2), 21), (null, 91), (k(4), 41), (k(5), 50)],
                "keys times {scale}, null key {null:?}"
            );
        }
    }

    #[test]
    fn a_delta_that_does_not_fit_its_base_is_corrupt() {
        let base = state(&[("a", 1)], &[1]);
        let other = RecordBatch::try_from_iter([(
            "name",
            Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
        )])
        .unwrap();
        let base = std::slice::from_ref(&base);
        let err = apply_deltas(base, &[other], &["name".into()]).unwrap_err();
        assert!(err.to_string().contains("differ from its base"), "{err}");
        let err = apply_deltas(base, base, &["id".into()]).unwrap_err();
        assert!(err.to_string().contains("key column 'id'"), "{err}");
    }
}
