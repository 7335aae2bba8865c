//! What a Parquet sink writer carries across a checkpoint, as a one-row batch:
//! the file still being written (its uploaded parts, the bytes not yet in a
//! part, its row groups' metadata) and the rows not yet in a row group.

use std::io::Cursor as IoCursor;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryArray, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use tidewater_core::{Error, Result, state};

use super::upload::Parts;

/// The version of this layout, recorded in checkpoints.
pub(crate) const STATE_VERSION: u32 = 1;

/// The JSON part of the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WriterMeta {
    /// The sequence number the next file of this subtask takes.
    pub next_seq: u64,
    /// The file being written, if any.
    pub open: Option<OpenMeta>,
}

/// A file carried across the checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OpenMeta {
    /// Its sequence number.
    pub seq: u64,
    /// Its uploaded parts.
    pub parts: Parts,
    /// Bytes of the file encoded so far: the parts, then the tail.
    pub emitted: u64,
    /// When it was opened (milliseconds since the Unix epoch), for the age limit.
    pub opened_at_ms: u64,
}

/// Everything a writer carries across a checkpoint.
pub(crate) struct WriterState {
    pub meta: WriterMeta,
    /// The open file's row groups' metadata (see `FileEncoder::row_group_metadata`).
    pub row_groups: Vec<u8>,
    /// Bytes of the open file not yet in a part.
    pub tail: Vec<u8>,
    /// The rows' schema, once known.
    pub schema: Option<SchemaRef>,
    /// Rows not yet encoded.
    pub rows: Vec<RecordBatch>,
}

fn layout() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("meta", DataType::Utf8, false),
        Field::new("row_groups", DataType::Binary, false),
        Field::new("tail", DataType::Binary, false),
        Field::new("rows", DataType::Binary, true),
    ]))
}

impl WriterState {
    /// A writer that carries nothing and names its next file `next_seq`.
    pub fn fresh(next_seq: u64) -> Self {
        WriterState {
            meta: WriterMeta {
                next_seq,
                open: None,
            },
            row_groups: Vec::new(),
            tail: Vec::new(),
            schema: None,
            rows: Vec::new(),
        }
    }

    /// Encodes the state as a one-row batch.
    pub fn encode(&self) -> Result<RecordBatch> {
        let meta = serde_json::to_string(&self.meta)
            .map_err(|e| Error::Internal(format!("sink state does not serialise: {e}")))?;
        let rows = match &self.schema {
            Some(schema) => {
                let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
                for batch in &self.rows {
                    writer.write(batch)?;
                }
                writer.finish()?;
                Some(writer.into_inner()?)
            }
            None => None,
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![meta])),
            Arc::new(BinaryArray::from(vec![self.row_groups.as_slice()])),
            Arc::new(BinaryArray::from(vec![self.tail.as_slice()])),
            Arc::new(BinaryArray::from(vec![rows.as_deref()])),
        ];
        Ok(RecordBatch::try_new(layout(), columns)?)
    }

    /// Decodes what [`WriterState::encode`] made.
    pub fn decode(batch: &RecordBatch) -> Result<Self> {
        let corrupt = |what: String| Error::Corrupt(format!("parquet sink state: {what}"));
        if batch.num_rows() != 1 {
            return Err(corrupt(format!("{} rows, expected 1", batch.num_rows())));
        }
        let meta = state::column::<StringArray>(batch, "meta")?.value(0);
        let meta: WriterMeta =
            serde_json::from_str(meta).map_err(|e| corrupt(format!("meta is not valid: {e}")))?;
        let row_groups = state::column::<BinaryArray>(batch, "row_groups")?
            .value(0)
            .to_vec();
        let tail = state::column::<BinaryArray>(batch, "tail")?
            .value(0)
            .to_vec();
        let rows_column = state::column::<BinaryArray>(batch, "rows")?;
        let (schema, rows) = if rows_column.is_valid(0) {
            let reader = StreamReader::try_new(IoCursor::new(rows_column.value(0)), None)?;
            let schema = reader.schema();
            let rows = reader.collect::<std::result::Result<Vec<_>, _>>()?;
            (Some(schema), rows)
        } else {
            (None, Vec::new())
        };
        Ok(WriterState {
            meta,
            row_groups,
            tail,
            schema,
            rows,
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::Int32Array;

    use super::*;

    #[test]
    fn state_round_trips() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1, 2]))])
                .unwrap();
        let state = WriterState {
            meta: WriterMeta {
                next_seq: 7,
                open: Some(OpenMeta {
                    seq: 6,
                    parts: Parts::Staged {
                        parts: vec!["_staging/a/0000-000006.part-00000".into()],
                    },
                    emitted: 1234,
                    opened_at_ms: 99,
                }),
            },
            row_groups: vec![1, 2, 3],
            tail: vec![4, 5],
            schema: Some(schema),
            rows: vec![batch.clone()],
        };
        let back = WriterState::decode(&state.encode().unwrap()).unwrap();
        assert_eq!(back.meta, state.meta);
        let empty = WriterState {
            schema: None,
            rows: Vec::new(),
            ..WriterState::decode(&state.encode().unwrap()).unwrap()
        };
        assert!(
            WriterState::decode(&empty.encode().unwrap())
                .unwrap()
                .schema
                .is_none()
        );
        assert_eq!(back.row_groups, state.row_groups);
        assert_eq!(back.tail, state.tail);
        assert_eq!(back.rows, vec![batch]);
    }
}
