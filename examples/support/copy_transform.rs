//! The copy transform shared by the backfill examples: keep rows with
//! `id % 3 != 0`, add `w = v * 2.0`.

use std::sync::Arc;

use arrow::array::{BooleanArray, Float64Array, Int64Array, RecordBatch};
use arrow::compute::kernels::cmp::neq;
use arrow::compute::kernels::numeric::{mul, rem};
use arrow::datatypes::{Field, Schema};
use tidewater::{Error, Result};

/// The input schema plus `w` (Float64).
pub fn with_w(input: &Schema) -> Arc<Schema> {
    let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("w", arrow::datatypes::DataType::Float64, true));
    Arc::new(Schema::new(fields))
}

/// Rows to keep: `id % 3 != 0`.
pub fn keep_row(batch: &RecordBatch) -> Result<BooleanArray> {
    let id = batch
        .column_by_name("id")
        .ok_or_else(|| Error::BadInput("no column 'id'".into()))?;
    let id = arrow::compute::cast(id, &arrow::datatypes::DataType::Int64)?;
    Ok(neq(
        &rem(&id, &Int64Array::new_scalar(3))?,
        &Int64Array::new_scalar(0),
    )?)
}

/// Appends `w = v * 2.0`.
pub fn add_w(batch: RecordBatch) -> Result<RecordBatch> {
    let v = batch
        .column_by_name("v")
        .ok_or_else(|| Error::BadInput("no column 'v'".into()))?;
    let w = mul(v, &Float64Array::new_scalar(2.0))?;
    let mut columns = batch.columns().to_vec();
    columns.push(w);
    Ok(RecordBatch::try_new(with_w(&batch.schema()), columns)?)
}
