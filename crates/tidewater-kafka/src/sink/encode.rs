//! Rows as Kafka records: the value is the row as a JSON object (arrow's
//! JSON writer: numbers stay numbers, nulls are left out), the key the
//! text of one column when the sink has a key column.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, BinaryBuilder, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::array_value_to_string;
use tidewater_core::{Error, Result};

/// The schema of encoded records: what the exactly-once sink stages with
/// each checkpoint.
pub(crate) fn records_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, false),
    ]))
}

/// `batch`'s rows as records: (key, value) columns of [`records_schema`].
pub(crate) fn encode(batch: &RecordBatch, key_column: Option<&str>) -> Result<RecordBatch> {
    let mut lines = Vec::with_capacity(batch.num_rows() * 64);
    {
        let mut writer = arrow::json::LineDelimitedWriter::new(&mut lines);
        writer.write(batch)?;
        writer.finish()?;
    }
    let mut values = BinaryBuilder::with_capacity(batch.num_rows(), lines.len());
    for line in lines.split(|b| *b == b'\n').take(batch.num_rows()) {
        values.append_value(line);
    }
    let keys: ArrayRef = match key_column {
        None => Arc::new(BinaryArray::new_null(batch.num_rows())),
        Some(name) => {
            let column = batch.column_by_name(name).ok_or_else(|| {
                Error::InvalidPipeline(format!(
                    "the Kafka sink's key column '{name}' is not among the rows' columns ({})",
                    batch
                        .schema()
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let mut keys = BinaryBuilder::with_capacity(batch.num_rows(), batch.num_rows() * 8);
            for row in 0..batch.num_rows() {
                if column.is_null(row) {
                    keys.append_null();
                } else {
                    keys.append_value(array_value_to_string(column, row)?.as_bytes());
                }
            }
            Arc::new(keys.finish())
        }
    };
    Ok(RecordBatch::try_new(
        records_schema(),
        vec![keys, Arc::new(values.finish())],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Float64Array, Int64Array, StringArray};

    #[test]
    fn rows_become_json_values_keyed_by_a_column() {
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            ("v", Arc::new(Float64Array::from(vec![Some(0.5), None]))),
            ("s", Arc::new(StringArray::from(vec!["a\nb", "c"]))),
        ])
        .unwrap();
        let records = encode(&batch, Some("id")).unwrap();
        let values = records.column(1).as_binary::<i32>();
        assert_eq!(values.value(0), br#"{"id":1,"v":0.5,"s":"a\nb"}"#);
        assert_eq!(values.value(1), br#"{"id":2,"s":"c"}"#);
        assert_eq!(records.column(0).as_binary::<i32>().value(1), b"2");

        let unkeyed = encode(&batch, None).unwrap();
        assert!(unkeyed.column(0).is_null(0));
        let e = encode(&batch, Some("nope")).unwrap_err().to_string();
        assert!(
            e.contains("key column 'nope' is not among the rows' columns (id, v, s)"),
            "{e}"
        );
    }
}
