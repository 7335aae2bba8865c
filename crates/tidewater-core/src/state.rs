//! Helpers for operators that turn their state into a `RecordBatch` and back.

use arrow::array::Array;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// The column `name` of a state batch, downcast to `T`, or a clear error.
pub fn column<'a, T: Array + 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    let column = batch.column_by_name(name).ok_or_else(|| {
        Error::Corrupt(format!(
            "state batch has no column '{name}' (columns: {:?})",
            column_names(batch)
        ))
    })?;
    column.as_any().downcast_ref::<T>().ok_or_else(|| {
        Error::Corrupt(format!(
            "state column '{name}' has type {} where {} was expected",
            column.data_type(),
            std::any::type_name::<T>()
        ))
    })
}

fn column_names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}
