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

/// A record that does not decode, set aside with why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejected {
    /// Its offset.
    pub offset: i64,
    /// Its key, as sent.
    pub key: Option<Vec<u8>>,
    /// Its value, as sent.
    pub value: Option<Vec<u8>>,
    /// What is wrong with it: `topic 't', partition p, offset o: ...`.
    pub reason: String,
}

/// A JSON record waiting for the batch's decode.
struct PendingJson {
    offset: i64,
    timestamp: Option<i64>,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
}

/// The value column being built.
enum Values {
    Raw(BinaryBuilder),
    Utf8(StringBuilder),
    /// Decoded at the batch's end, all at once; one by one only when that
    /// fails, to find the records that do not fit the schema.
    Json {
        schema: SchemaRef,
        pending: Vec<PendingJson>,
    },
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
            Format::Json(value_schema) => (
                Values::Json {
                    schema: Arc::clone(value_schema),
                    pending: Vec::with_capacity(batch_rows.min(1 << 16)),
                },
                false,
            ),
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
            rows: 0,
        })
    }

    /// Rows added so far.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    fn reason(&self, offset: i64, what: &str) -> String {
        format!(
            "Kafka topic '{}', partition {}, offset {offset}: {what}",
            self.topic, self.partition
        )
    }

    fn reject(
        &self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        what: &str,
    ) -> Rejected {
        Rejected {
            offset,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            reason: self.reason(offset, what),
        }
    }

    /// Adds one record, or says why it does not decode (it is then not added).
    pub(crate) fn push(
        &mut self,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Option<Rejected> {
        let text_key = self.keys_text.is_some();
        if text_key && let Some(Err(e)) = key.map(std::str::from_utf8) {
            return Some(self.reject(offset, key, value, &format!("the key is not UTF-8 ({e})")));
        }
        match &mut self.values {
            Values::Raw(b) => b.append_option(value),
            Values::Utf8(b) => match value.map(std::str::from_utf8).transpose() {
                Ok(text) => b.append_option(text),
                Err(e) => {
                    let what = format!("the value is not UTF-8 ({e})");
                    return Some(self.reject(offset, key, value, &what));
                }
            },
            Values::Json { pending, .. } => {
                let Some(bytes) = value else {
                    let what = "the value is empty (a tombstone), not a JSON object";
                    return Some(self.reject(offset, key, value, what));
                };
                // One JSON value a record, or the rows would not line up with their offsets.
                if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                    let what = format!("the value is not one JSON object: {e}");
                    return Some(self.reject(offset, key, value, &what));
                }
                pending.push(PendingJson {
                    offset,
                    timestamp,
                    key: key.map(<[u8]>::to_vec),
                    value: bytes.to_vec(),
                });
                self.rows += 1;
                return None;
            }
        }
        self.append_metadata(offset, timestamp, key);
        None
    }

    fn append_metadata(&mut self, offset: i64, timestamp: Option<i64>, key: Option<&[u8]>) {
        match (&mut self.keys_binary, &mut self.keys_text) {
            (Some(b), _) => b.append_option(key),
            // Checked to be UTF-8 by `push`.
            (_, Some(b)) => b.append_option(key.map(|k| String::from_utf8_lossy(k))),
            (None, None) => unreachable!("one key builder is always set"),
        }
        self.offsets.append_value(offset);
        self.timestamps.append_option(timestamp);
        self.rows += 1;
    }

    /// Decodes `records` with `schema` as one batch.
    fn decode_json(schema: &SchemaRef, records: &[PendingJson]) -> Result<Option<RecordBatch>> {
        let mut decoder: Decoder = arrow::json::ReaderBuilder::new(Arc::clone(schema))
            .with_batch_size(records.len().max(1))
            .build_decoder()?;
        for r in records {
            decoder.decode(&r.value)?;
        }
        Ok(decoder.flush()?)
    }

    /// The JSON values' columns, and the records that do not fit the schema.
    fn finish_json(&mut self) -> Result<(Vec<ArrayRef>, Vec<Rejected>)> {
        let Values::Json { schema, pending } = &mut self.values else {
            unreachable!("called for JSON only")
        };
        let (schema, pending) = (Arc::clone(schema), std::mem::take(pending));
        self.rows = 0;
        let mut rejected = Vec::new();
        let good: Vec<PendingJson> = match Self::decode_json(&schema, &pending) {
            Ok(_) => pending,
            // Some record does not fit: find which, one by one (the slow path).
            Err(_) => pending
                .into_iter()
                .filter_map(
                    |r| match Self::decode_json(&schema, std::slice::from_ref(&r)) {
                        Ok(_) => Some(r),
                        Err(e) => {
                            let what = format!("the value does not fit the JSON schema: {e}");
                            rejected.push(Rejected {
                                offset: r.offset,
                                reason: self.reason(r.offset, &what),
                                key: r.key,
                                value: Some(r.value),
                            });
                            None
                        }
                    },
                )
                .collect(),
        };
        let columns = match Self::decode_json(&schema, &good)? {
            Some(batch) if batch.num_rows() == good.len() => batch.columns().to_vec(),
            None if good.is_empty() => RecordBatch::new_empty(Arc::clone(&schema))
                .columns()
                .to_vec(),
            other => {
                return Err(Error::Internal(format!(
                    "the JSON decoder gave {} rows for {} records",
                    other.map_or(0, |b| b.num_rows()),
                    good.len()
                )));
            }
        };
        for r in &good {
            self.append_metadata(r.offset, r.timestamp, r.key.as_deref());
        }
        Ok((columns, rejected))
    }

    /// The batch of the records added (the builder starts afresh), and
    /// those of them that turned out not to decode.
    pub(crate) fn finish(&mut self) -> Result<(RecordBatch, Vec<Rejected>)> {
        let (mut columns, rejected): (Vec<ArrayRef>, Vec<Rejected>) = match &mut self.values {
            Values::Raw(b) => (vec![Arc::new(b.finish())], Vec::new()),
            Values::Utf8(b) => (vec![Arc::new(b.finish())], Vec::new()),
            Values::Json { .. } => self.finish_json()?,
        };
        let rows = self.rows;
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
        Ok((
            RecordBatch::try_new(Arc::clone(&self.schema), columns)?,
            rejected,
        ))
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
        assert_eq!(
            raw.push(10, Some(1_000), Some(b"k"), Some(&[0xff, 0])),
            None
        );
        assert_eq!(raw.push(11, None, None, None), None);
        let (batch, rejected) = raw.finish().unwrap();
        assert!(rejected.is_empty());
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
        assert_eq!(
            text.push(5, None, Some(b"a"), Some("héllo".as_bytes())),
            None
        );
        let bad = text.push(6, None, None, Some(&[0xff])).expect("rejected");
        assert_eq!((bad.offset, bad.value.as_deref()), (6, Some(&[0xff][..])));
        assert!(
            bad.reason
                .contains("topic 'events', partition 3, offset 6: the value is not UTF-8"),
            "{}",
            bad.reason
        );
        let bad_key = text
            .push(7, None, Some(&[0xfe]), Some(b"ok"))
            .expect("rejected");
        assert!(
            bad_key.reason.contains("the key is not UTF-8"),
            "{}",
            bad_key.reason
        );
        let (batch, _) = text.finish().unwrap();
        assert_eq!(batch.num_rows(), 1, "rejected records are not in the batch");
        assert_eq!(batch.column(0).as_string::<i32>().value(0), "héllo");
    }

    #[test]
    fn json_records_become_columns_and_bad_ones_are_set_aside_by_offset() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let format = Format::Json(schema);
        let mut json = builder(&format);
        let push =
            |b: &mut RecordsBuilder, offset, value: &[u8]| b.push(offset, None, None, Some(value));
        assert_eq!(
            json.push(
                0,
                None,
                Some(b"1"),
                Some(br#"{"id": 1, "name": "a", "extra": true}"#)
            ),
            None
        );
        assert_eq!(push(&mut json, 1, br#"{"id": 2}"#), None);
        let (batch, rejected) = json.finish().unwrap();
        assert!(rejected.is_empty());
        assert_eq!(
            batch.column(0).as_primitive::<Int64Type>().values(),
            &[1, 2]
        );
        assert!(batch.column(1).is_null(1));
        assert_eq!(batch.column(2).as_string::<i32>().value(0), "1");
        assert_eq!(batch.schema().field(0).name(), "id");

        let two = push(&mut json, 7, b"{\"id\": 1} {\"id\": 2}").expect("rejected");
        assert!(
            two.reason
                .contains("offset 7: the value is not one JSON object"),
            "{}",
            two.reason
        );
        assert!(push(&mut json, 8, b"not json").is_some());
        let tombstone = json.push(9, None, None, None).expect("rejected");
        assert!(
            tombstone.reason.contains("tombstone"),
            "{}",
            tombstone.reason
        );

        // A type that does not fit is found at the batch's decode, by offset.
        assert_eq!(push(&mut json, 20, br#"{"id": 20}"#), None);
        assert_eq!(push(&mut json, 21, br#"{"id": "twenty-one"}"#), None);
        assert_eq!(push(&mut json, 22, br#"{"id": 22}"#), None);
        let (batch, rejected) = json.finish().unwrap();
        assert_eq!(
            batch.column(0).as_primitive::<Int64Type>().values(),
            &[20, 22]
        );
        assert_eq!(
            batch.column(4).as_primitive::<Int64Type>().values(),
            &[20, 22]
        );
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].offset, 21);
        assert!(
            rejected[0]
                .reason
                .contains("offset 21: the value does not fit the JSON schema"),
            "{}",
            rejected[0].reason
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
