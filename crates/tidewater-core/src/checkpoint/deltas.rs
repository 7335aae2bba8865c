//! Applying an incremental chain: a base state batch and the deltas after
//! it, one row per key, merged into the state the chain stands for.

use arrow::array::{ArrayRef, BooleanArray};
use arrow::compute::{concat_batches, filter_record_batch, interleave_record_batch};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::error::{Error, Result};

/// The state `base` and then `deltas` (oldest first) stand for: every key's
/// newest row. Rows are one per key, the key in the `keys` columns; a
/// delta's row replaces the base's (or an earlier delta's) row of its key.
/// The base's surviving rows come first, in their order, then the deltas'.
///
/// Only the deltas' keys are hashed; the base is scanned once against
/// them, so a short chain costs little more than reading the base.
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
/// let base = batch(vec![1, 2, 3], vec![10, 20, 30]);
/// let delta = batch(vec![2, 4], vec![21, 40]);
/// let state = apply_deltas(base, &[delta], &["k".to_string()]).unwrap();
/// assert_eq!(state, batch(vec![1, 3, 2, 4], vec![10, 30, 21, 40]));
/// ```
pub fn apply_deltas(
    base: RecordBatch,
    deltas: &[RecordBatch],
    keys: &[String],
) -> Result<RecordBatch> {
    let deltas: Vec<&RecordBatch> = deltas.iter().filter(|d| d.num_rows() > 0).collect();
    if deltas.is_empty() {
        return Ok(base);
    }
    let schema = base.schema();
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
    let fields = key_columns(&base)?
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields)?;
    let delta_rows: Vec<Rows> = deltas
        .iter()
        .map(|d| Ok(converter.convert_columns(&key_columns(d)?)?))
        .collect::<Result<_>>()?;

    // The newest row of each changed key.
    let mut newest: HashMap<&[u8], (usize, usize), RandomState> = HashMap::default();
    for (d, rows) in delta_rows.iter().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            newest.insert(row.data(), (d, r));
        }
    }
    let base_rows = converter.convert_columns(&key_columns(&base)?)?;
    let kept: BooleanArray = base_rows
        .iter()
        .map(|row| Some(!newest.contains_key(row.data())))
        .collect();
    let kept = filter_record_batch(&base, &kept)?;

    // In the deltas' order, so that the result does not depend on hashing.
    let mut winners = Vec::with_capacity(newest.len());
    for (d, rows) in delta_rows.iter().enumerate() {
        for (r, row) in rows.iter().enumerate() {
            if newest.get(row.data()) == Some(&(d, r)) {
                winners.push((d, r));
            }
        }
    }
    let changed = interleave_record_batch(&deltas, &winners)?;
    Ok(concat_batches(&schema, [&kept, &changed])?)
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
        let merged = apply_deltas(base.clone(), &deltas, &keys).unwrap();
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
        assert_eq!(apply_deltas(base.clone(), &[], &keys).unwrap(), base);
    }

    #[test]
    fn a_delta_that_does_not_fit_its_base_is_corrupt() {
        let base = state(&[("a", 1)], &[1]);
        let other = RecordBatch::try_from_iter([(
            "name",
            Arc::new(StringArray::from(vec!["a"])) as ArrayRef,
        )])
        .unwrap();
        let err = apply_deltas(base.clone(), &[other], &["name".into()]).unwrap_err();
        assert!(err.to_string().contains("differ from its base"), "{err}");
        let err = apply_deltas(base.clone(), &[base], &["id".into()]).unwrap_err();
        assert!(err.to_string().contains("key column 'id'"), "{err}");
    }
}
