//! A Parquet file encoded one row group at a time, whose bytes are handed out
//! as they are produced and whose progress survives a restart.
//!
//! A file that outlives a checkpoint may be finished by another process. What
//! that process needs is the bytes already uploaded (it only appends) and the
//! metadata of the row groups in them, which the footer lists. So the encoder
//! keeps the row groups' metadata with absolute offsets, can serialise it
//! into the checkpoint ([`FileEncoder::row_group_metadata`]), and a resumed
//! encoder shifts the offsets of its own row groups past the bytes written
//! before it. The footer is written from all of them at the end.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::errors::Result as ParquetResult;
use parquet::file::metadata::{
    FileMetaData, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter, RowGroupMetaData,
};
use parquet::file::properties::WriterProperties;

/// Bytes of the magic number a Parquet file starts and ends with.
const MAGIC_LEN: u64 = 4;
/// The footer's trailer: metadata length (4 bytes) and magic (4 bytes).
const TRAILER_LEN: usize = 8;

/// Encodes one Parquet file.
pub(crate) struct FileEncoder {
    /// The file's metadata template (schema, Arrow schema, column orders).
    template: FileMetaData,
    /// Row groups written before this encoder took over, offsets absolute.
    earlier: Vec<RowGroupMetaData>,
    writer: ArrowWriter<Vec<u8>>,
    /// Absolute offset of the writer's byte 0.
    base: u64,
    /// Leading bytes of the writer's output to drop (a resumed writer's magic).
    skip: usize,
    /// Bytes handed out so far, from the start of the file.
    emitted: u64,
}

impl FileEncoder {
    /// Starts a new file.
    pub fn new(schema: SchemaRef, props: WriterProperties) -> ParquetResult<Self> {
        let template = template(&schema, &props)?;
        Ok(FileEncoder {
            template,
            earlier: Vec::new(),
            writer: ArrowWriter::try_new(Vec::new(), schema, Some(props))?,
            base: 0,
            skip: 0,
            emitted: 0,
        })
    }

    /// Continues a file of which `emitted` bytes, holding the row groups in
    /// `row_group_metadata` (from [`FileEncoder::row_group_metadata`]), were
    /// handed out before.
    pub fn resume(
        schema: SchemaRef,
        props: WriterProperties,
        row_group_metadata: &[u8],
        emitted: u64,
    ) -> ParquetResult<Self> {
        let mut encoder = Self::new(schema, props)?;
        if emitted < MAGIC_LEN {
            // Nothing was handed out: this is a fresh file.
            return Ok(encoder);
        }
        if !row_group_metadata.is_empty() {
            let thrift =
                &row_group_metadata[..row_group_metadata.len().saturating_sub(TRAILER_LEN)];
            encoder.earlier = ParquetMetaDataReader::decode_metadata(thrift)?
                .row_groups()
                .to_vec();
        }
        // The new writer starts with its own magic: drop it, and place its
        // byte MAGIC_LEN at `emitted`.
        encoder.base = emitted - MAGIC_LEN;
        encoder.skip = MAGIC_LEN as usize;
        encoder.emitted = emitted;
        Ok(encoder)
    }

    /// Encodes `batches` as one row group.
    pub fn write_row_group(&mut self, batches: &[RecordBatch]) -> ParquetResult<()> {
        for batch in batches {
            self.writer.write(batch)?;
        }
        self.writer.flush()?;
        self.writer.sync()?;
        Ok(())
    }

    /// Takes the bytes encoded since the last call.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.append_bytes_to(&mut bytes);
        bytes
    }

    /// Appends the bytes encoded since the last call to `out`. The encoder
    /// keeps its buffer's capacity for the next row group: a fresh buffer
    /// per row group, grown by doubling, is allocator churn that a
    /// multi-threaded allocator keeps as resident memory.
    pub fn append_bytes_to(&mut self, out: &mut Vec<u8>) {
        let encoded = self.writer.inner_mut();
        let skipped = self.skip.min(encoded.len());
        self.skip -= skipped;
        let fresh = &encoded[skipped..];
        out.extend_from_slice(fresh);
        self.emitted += fresh.len() as u64;
        encoded.clear();
    }

    /// Bytes of the file so far (handed out or not).
    pub fn bytes_so_far(&self) -> u64 {
        self.emitted + (self.writer.inner().len() - self.skip.min(self.writer.inner().len())) as u64
    }

    /// Bytes handed out by [`FileEncoder::take_bytes`] so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// Rows in the file's row groups.
    pub fn rows(&self) -> u64 {
        self.row_groups()
            .map(|groups| groups.iter().map(|g| g.num_rows() as u64).sum())
            .unwrap_or_default()
    }

    /// Every row group so far, with absolute offsets.
    fn row_groups(&self) -> ParquetResult<Vec<RowGroupMetaData>> {
        let shift = self.base as i64;
        let mut groups = self.earlier.clone();
        for group in self.writer.flushed_row_groups() {
            let ordinal = groups.len() as i16;
            groups.push(shifted(group, shift, ordinal)?);
        }
        Ok(groups)
    }

    /// The metadata of the row groups so far, for [`FileEncoder::resume`].
    pub fn row_group_metadata(&self) -> ParquetResult<Vec<u8>> {
        self.footer()
    }

    /// Finishes the file: the bytes not yet taken, then the footer.
    pub fn finish(mut self) -> ParquetResult<Vec<u8>> {
        let footer = self.footer()?;
        let mut bytes = self.take_bytes();
        bytes.extend_from_slice(&footer);
        Ok(bytes)
    }

    fn footer(&self) -> ParquetResult<Vec<u8>> {
        let groups = self.row_groups()?;
        let rows = groups.iter().map(RowGroupMetaData::num_rows).sum();
        let t = &self.template;
        let file = FileMetaData::new(
            t.version(),
            rows,
            t.created_by().map(str::to_string),
            t.key_value_metadata().cloned(),
            t.schema_descr_ptr(),
            t.column_orders().cloned(),
        );
        let metadata = ParquetMetaData::new(file, groups);
        let mut out = Vec::new();
        ParquetMetaDataWriter::new(&mut out, &metadata)
            .with_preserve_page_index_locations(false)
            .finish()?;
        Ok(out)
    }
}

/// The file-level metadata the writer would put in the footer of a file with
/// this schema and these properties: what an empty file's footer holds.
fn template(schema: &SchemaRef, props: &WriterProperties) -> ParquetResult<FileMetaData> {
    let empty = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(props.clone()))?.close()?;
    Ok(empty.file_metadata().clone())
}

/// `group` with every offset moved by `by` bytes.
fn shifted(group: &RowGroupMetaData, by: i64, ordinal: i16) -> ParquetResult<RowGroupMetaData> {
    let columns = group
        .columns()
        .iter()
        .map(|c| {
            c.clone()
                .into_builder()
                .set_data_page_offset(c.data_page_offset() + by)
                .set_dictionary_page_offset(c.dictionary_page_offset().map(|o| o + by))
                .set_index_page_offset(c.index_page_offset().map(|o| o + by))
                .set_bloom_filter_offset(c.bloom_filter_offset().map(|o| o + by))
                // Page indexes are written at close, which never happens here.
                .set_offset_index_offset(None)
                .set_offset_index_length(None)
                .set_column_index_offset(None)
                .set_column_index_length(None)
                .build()
        })
        .collect::<ParquetResult<Vec<_>>>()?;
    let mut builder = group
        .clone()
        .into_builder()
        .set_column_metadata(columns)
        .set_ordinal(i32::from(ordinal));
    if let Some(offset) = group.file_offset() {
        builder = builder.set_file_offset(offset + by);
    }
    builder.build()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let ids: Int64Array = (from..from + rows).collect();
        let s: StringArray = (from..from + rows)
            .map(|i| (i % 3 != 0).then(|| format!("v{i}")))
            .collect();
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(s)]).unwrap()
    }

    fn read_ids(bytes: Vec<u8>) -> Vec<i64> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes))
            .unwrap()
            .build()
            .unwrap();
        let mut ids = Vec::new();
        for batch in reader {
            let batch = batch.unwrap();
            let col = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            ids.extend(col.values().iter().copied());
        }
        ids
    }

    #[test]
    fn a_file_resumed_twice_reads_back_whole() {
        let schema = batch(0, 1).schema();
        let props = WriterProperties::builder().build();
        let mut file = Vec::new();

        let mut first = FileEncoder::new(schema.clone(), props.clone()).unwrap();
        first.write_row_group(&[batch(0, 1000)]).unwrap();
        first
            .write_row_group(&[batch(1000, 500), batch(1500, 10)])
            .unwrap();
        file.extend(first.take_bytes());
        let metadata = first.row_group_metadata().unwrap();
        let emitted = first.emitted();
        assert_eq!(emitted as usize, file.len());
        drop(first); // the process dies here

        let mut second =
            FileEncoder::resume(schema.clone(), props.clone(), &metadata, emitted).unwrap();
        second.write_row_group(&[batch(1510, 700)]).unwrap();
        file.extend(second.take_bytes());
        let metadata = second.row_group_metadata().unwrap();
        let emitted = second.emitted();
        drop(second);

        let mut third = FileEncoder::resume(schema, props, &metadata, emitted).unwrap();
        third.write_row_group(&[batch(2210, 90)]).unwrap();
        assert_eq!(third.rows(), 2300);
        file.extend(third.finish().unwrap());

        assert_eq!(read_ids(file), (0..2300).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_resume_point_is_a_fresh_file() {
        let schema = batch(0, 1).schema();
        let props = WriterProperties::builder().build();
        let mut encoder = FileEncoder::new(schema, props).unwrap();
        encoder.write_row_group(&[batch(5, 3)]).unwrap();
        assert_eq!(read_ids(encoder.finish().unwrap()), vec![5, 6, 7]);
    }
}
