//! Kafka records as Arrow rows: the value decoded by the source's
//! [`Format`], beside the record's key, partition, offset and timestamp.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, RecordBatch, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::json::reader::Decoder;
use tidewater_core::{Error, Result};

/// How a record's value becomes columns.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    /// The bytes as they are: a `value` column of binary, and the key as binary.
    Raw,
    /// UTF-8 text: a `value` column of strings (a record that is not UTF-8
    /// fails the job, naming its partition and offset).
    Utf8,
    /// A JSON object per record, read into these columns (arrow's JSON
    /// decoder: fields missing from a record are null, extra ones ignored).
    Json(SchemaRef),
}

/// The columns every format adds, after the value's.
const METADATA: [&str; 4] = ["key", "partition", "offset", "timestamp"];

impl Format {
    /// The schema of the source's batches in this format.
    ///
    /// ```
    /// use tidewater_kafka::Format;
    /// let names: Vec<_> = Format::Utf8.schema().unwrap().fields().iter()
    ///     .map(|f| f.name().clone()).collect();
    /// assert_eq!(names, ["value", "key", "partition", "offset", "timestamp"]);
    /// ```
    pub fn schema(&self) -> Result<SchemaRef> {
        let text = |name: &str| Field::new(name, DataType::Utf8, true);
        let bytes = |name: &str| Field::new(name, DataType::Binary, true);
        let mut fields: Vec<Field> = match self {
            Format::Raw => vec![bytes("value"), bytes("key")],
            Format::Utf8 => vec![text("value"), text("key")],
            Format::Json(schema) => {
                if let Some(clash) = schema
                    .fields()
                    .iter()
                    .find(|f| METADATA.contains(&f.name().as_str()))
                {
                    return Err(Error::InvalidConfig(format!(
                        "the JSON schema has a field '{}', a name the Kafka source uses for the \
                         record's own {}: rename it in the schema",
                        clash.name(),
                        clash.name()
                    )));
                }
                let mut fields: Vec<Field> = schema
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect();
                fields.push(text("key"));
                fields
            }
        };
        fields.push(Field::new("partition", DataType::Int32, false));
        fields.push(Field::new("offset", DataType::Int64, false));
        fields.push(Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ));
        Ok(Arc::new(Schema::new(fields)))
    }
}

/// The value column being built.
enum Values {
    Raw(BinaryBuilder),
    Utf8(StringBuilder),
    Json(Box<Decoder>),
}

/// Builds one batch of one partition's records.
pub(crate) struct RecordsBuilder {
    schema: SchemaRef,
    topic: Arc<str>,
    partition: i32,
    values: Values,
    keys_binary: Option<BinaryBuilder>,
    keys_text: Option<StringBuilder>,
    offsets: Int64Builder,
    timestamps: TimestampMillisecondBuilder,
    first_offset: Option<i64>,
    rows: usize,
}

impl RecordsBuilder {
    /// A builder of `format` rows (whose schema is `schema`) for `partition` of `topic`.
    pub(crate) fn new(
        format: &Format,
        schema: SchemaRef,
        topic: Arc<str>,
        partition: i32,
        batch_rows: usize,
    ) -> Result<Self> {
        let (values, binary_keys) = match format {
            Format::Raw => (Values::Raw(BinaryBuilder::new()), true),
            Format::Utf8 => (Values::Utf8(StringBuilder::new()), false),
            Format::Json(value_schema) => {
                let decoder = arrow::json::ReaderBuilder::new(Arc::clone(value_schema))
                    .with_batch_size(batch_rows.max(1))
                    .build_decoder()?;
                (Values::Json(Box::new(decoder)), false)
            }
        };
        Ok(RecordsBuilder {
            schema,
            topic,
            partition,
            values,
            keys_binary: binary_keys.then(BinaryBuilder::new),
            keys_text: (!binary_keys).then(StringBuilder::new),
            offsets: Int64Builder::new(),
            timestamps: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            first_offset: None,
            rows: 0,
        })
    }

    /// Rows added so far.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    fn bad(&self, offset: i64, what: &str) -> Error {
        Error::BadInput(format!(
            "Kafka topic '{}', partition {}, offset {offset}: {what}",
            self.topic, self.partition
        ))
    }

    /// Adds one record.
    pub(crate) fn push(
        &mut self,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<()> {
        match &mut self.values {
            Values::Raw(b) => b.append_option(value),
            Values::Utf8(b) => match value.map(std::str::from_utf8).transpose() {
                Ok(text) => b.append_option(text),
                Err(e) => return Err(self.bad(offset, &format!("the value is not UTF-8 ({e})"))),
            },
            Values::Json(decoder) => {
                let Some(value) = value else {
                    return Err(self.bad(
                        offset,
                        "the value is empty (a tombstone), not a JSON object",
                    ));
                };
                // One JSON value a record, or the rows would not line up with their offsets.
                if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(value) {
                    return Err(self.bad(offset, &format!("the value is not one JSON object: {e}")));
                }
                let read = decoder
                    .decode(value)
                    .map_err(|e| self.bad(offset, &format!("the value does not decode: {e}")))?;
                if read < value.len() {
                    return Err(Error::Internal(format!(
                        "the JSON decoder took {read} of {} bytes: more rows than batch_rows",
                        value.len()
                    )));
                }
            }
        }
        match (&mut self.keys_binary, &mut self.keys_text) {
            (Some(b), _) => b.append_option(key),
            (_, Some(b)) => match key.map(std::str::from_utf8).transpose() {
                Ok(text) => b.append_option(text),
                Err(e) => return Err(self.bad(offset, &format!("the key is not UTF-8 ({e})"))),
            },
            (None, None) => unreachable!("one key builder is always set"),
        }
        self.offsets.append_value(offset);
        self.timestamps.append_option(timestamp);
        self.first_offset.get_or_insert(offset);
        self.rows += 1;
        Ok(())
    }

    /// The batch of the records added, and a fresh builder's state.
    pub(crate) fn finish(&mut self) -> Result<RecordBatch> {
        let rows = self.rows;
        let mut columns: Vec<ArrayRef> = match &mut self.values {
            Values::Raw(b) => vec![Arc::new(b.finish())],
            Values::Utf8(b) => vec![Arc::new(b.finish())],
            Values::Json(decoder) => match decoder.flush() {
                Ok(Some(batch)) if batch.num_rows() == rows => batch.columns().to_vec(),
                Ok(None) if rows == 0 => {
                    let empty = RecordBatch::new_empty(Arc::new(Schema::new(
                        self.schema.fields()[..self.schema.fields().len() - METADATA.len()]
                            .to_vec(),
                    )));
                    empty.columns().to_vec()
                }
                Ok(other) => {
                    return Err(Error::Internal(format!(
                        "the JSON decoder gave {} rows for {rows} records",
                        other.map_or(0, |b| b.num_rows())
                    )));
                }
                Err(e) => {
                    let first = self.first_offset.unwrap_or(0);
                    return Err(Error::BadInput(format!(
                        "Kafka topic '{}', partition {}, a record at offsets {first} to {} does \
                         not fit the JSON schema: {e}; fix the schema (or the records)",
                        self.topic,
                        self.partition,
                        first + rows as i64 - 1
                    )));
                }
            },
        };
        match (&mut self.keys_binary, &mut self.keys_text) {
            (Some(b), _) => columns.push(Arc::new(b.finish())),
            (_, Some(b)) => columns.push(Arc::new(b.finish())),
            (None, None) => unreachable!("one key builder is always set"),
        }
        columns.push(Arc::new(
            Int32Builder::with_capacity(rows)
                .tap(|b| b.append_value_n(self.partition, rows))
                .finish(),
        ));
        columns.push(Arc::new(self.offsets.finish()));
        columns.push(Arc::new(self.timestamps.finish()));
        self.rows = 0;
        self.first_offset = None;
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

/// `f(&mut self)`, then `self`: for builders.
trait Tap: Sized {
    fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self
    }
}

impl<T> Tap for T {}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;

    fn builder(format: &Format) -> RecordsBuilder {
        RecordsBuilder::new(format, format.schema().unwrap(), "events".into(), 3, 16).unwrap()
    }

    #[test]
    fn raw_and_text_records_keep_their_key_offset_and_time() {
        let mut raw = builder(&Format::Raw);
        raw.push(10, Some(1_000), Some(b"k"), Some(&[0xff, 0]))
            .unwrap();
        raw.push(11, None, None, None).unwrap();
        let batch = raw.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.column(0).as_binary::<i32>().value(0), [0xff, 0]);
        assert!(batch.column(0).is_null(1));
        assert_eq!(batch.column(1).as_binary::<i32>().value(0), b"k");
        assert_eq!(
            batch
                .column(2)
                .as_primitive::<arrow::datatypes::Int32Type>()
                .value(1),
            3
        );
        assert_eq!(
            batch.column(3).as_primitive::<Int64Type>().values(),
            &[10, 11]
        );
        assert!(batch.column(4).is_null(1));

        let mut text = builder(&Format::Utf8);
        text.push(5, None, Some(b"a"), Some("héllo".as_bytes()))
            .unwrap();
        assert_eq!(
            text.finish().unwrap().column(0).as_string::<i32>().value(0),
            "héllo"
        );
        let e = text
            .push(6, None, None, Some(&[0xff]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("topic 'events', partition 3, offset 6: the value is not UTF-8"),
            "{e}"
        );
    }

    #[test]
    fn json_records_become_columns_and_a_bad_one_is_named() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let format = Format::Json(schema);
        let mut json = builder(&format);
        json.push(
            0,
            None,
            Some(b"1"),
            Some(br#"{"id": 1, "name": "a", "extra": true}"#),
        )
        .unwrap();
        json.push(1, None, None, Some(br#"{"id": 2}"#)).unwrap();
        let batch = json.finish().unwrap();
        assert_eq!(
            batch.column(0).as_primitive::<Int64Type>().values(),
            &[1, 2]
        );
        assert!(batch.column(1).is_null(1));
        assert_eq!(batch.column(2).as_string::<i32>().value(0), "1");
        assert_eq!(batch.schema().field(0).name(), "id");

        let e = json
            .push(7, None, None, Some(b"{\"id\": 1} {\"id\": 2}"))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("offset 7: the value is not one JSON object"),
            "{e}"
        );
        let e = json.push(8, None, None, Some(b"not json")).unwrap_err();
        assert!(e.to_string().contains("offset 8"), "{e}");
        let e = json.push(9, None, None, None).unwrap_err();
        assert!(e.to_string().contains("tombstone"), "{e}");

        json.push(20, None, None, Some(br#"{"id": "twenty"}"#))
            .unwrap();
        let e = json.finish().unwrap_err().to_string();
        assert!(
            e.contains("at offsets 20 to 20 does not fit the JSON schema"),
            "{e}"
        );
    }

    #[test]
    fn a_schema_may_not_take_the_records_own_column_names() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "offset",
            DataType::Int64,
            true,
        )]));
        let e = Format::Json(schema).schema().unwrap_err().to_string();
        assert!(e.contains("a field 'offset'"), "{e}");
    }
}
