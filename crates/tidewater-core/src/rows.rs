//! One row of a batch as a user reads it: in messages and in dead letters.

use arrow::array::{Array, RecordBatch};
use arrow::util::display::array_value_to_string;
use serde_json::{Map, Value};

/// Row `row` of `batch` as a JSON object, column name to value: each value
/// as Arrow displays it (a string), a null as `null`. Used where a row is
/// set aside (dead letters) or named in an error, so that any type reads
/// the same.
///
/// ```
/// use std::sync::Arc;
/// use arrow::array::{Int64Array, RecordBatch, StringArray};
/// use arrow::datatypes::{DataType, Field, Schema};
///
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("id", DataType::Int64, false),
///     Field::new("s", DataType::Utf8, true),
/// ]));
/// let batch = RecordBatch::try_new(schema, vec![
///     Arc::new(Int64Array::from(vec![7])),
///     Arc::new(StringArray::from(vec![None::<&str>])),
/// ]).unwrap();
/// assert_eq!(tidewater_core::row_json(&batch, 0).to_string(), r#"{"id":"7","s":null}"#);
/// ```
pub fn row_json(batch: &RecordBatch, row: usize) -> Value {
    let mut object = Map::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let value = if column.is_null(row) {
            Value::Null
        } else {
            Value::String(array_value_to_string(column, row).unwrap_or_default())
        };
        object.insert(field.name().clone(), value);
    }
    Value::Object(object)
}
