//! One subtask's writer: buffers rows into row groups, row groups into a
//! file uploaded in parts, and files into commit handles.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use parquet::errors::ParquetError;
use tidewater_core::events::{FileFinished, FileResumed, InternalEvent, LeftoverDeleted};
use tidewater_core::{CheckpointId, Error, Result, SinkWriter};

use super::encoder::FileEncoder;
use super::state::{OpenMeta, WriterMeta, WriterState};
use super::upload::{MIN_PART_BYTES, Parts, Uploader};
use super::{FinishedFile, ParquetSinkOptions, Payload, STAGING};

/// The file being written.
struct OpenFile {
    seq: u64,
    parts: Parts,
    encoder: FileEncoder,
    /// Encoded bytes not yet uploaded.
    tail: Vec<u8>,
    opened_at_ms: u64,
}

pub(crate) struct ParquetSinkWriter {
    uploader: Uploader,
    options: ParquetSinkOptions,
    uid: String,
    subtask: usize,
    /// The run's fencing epoch: staged part names carry it, so two runs
    /// alive at once (one paused and woken) never write the same object.
    epoch: u64,
    next_seq: u64,
    schema: Option<SchemaRef>,
    /// Rows not yet encoded into a row group.
    buffer: Vec<RecordBatch>,
    buffered_rows: usize,
    /// When the first row waiting for a file arrived (the age limit counts
    /// from there, not from the file's first row group).
    pending_since_ms: Option<u64>,
    open: Option<OpenFile>,
    /// Files finished since the last pre-commit.
    finished: Vec<FinishedFile>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl ParquetSinkWriter {
    pub fn new(
        uploader: Uploader,
        options: ParquetSinkOptions,
        uid: String,
        subtask: usize,
        epoch: u64,
    ) -> Self {
        ParquetSinkWriter {
            uploader,
            options,
            uid,
            subtask,
            epoch,
            next_seq: 0,
            schema: None,
            buffer: Vec::new(),
            buffered_rows: 0,
            pending_since_ms: None,
            open: None,
            finished: Vec::new(),
        }
    }

    /// The name a file of this writer takes when committed.
    fn file_name(&self, seq: u64) -> String {
        format!("part-{}-{:04}-{seq:06}.parquet", self.uid, self.subtask)
    }

    /// The stem of a file's staged parts written by this run.
    fn staging_name(&self, seq: u64) -> String {
        format!(
            "{STAGING}/{}/{:04}-{seq:06}-e{}",
            self.uid, self.subtask, self.epoch
        )
    }

    fn parquet_error(&self, what: &str, e: ParquetError) -> Error {
        Error::External {
            message: format!("parquet sink '{}': {what}: {e}", self.uid),
            retryable: false,
        }
    }

    /// Continues from a checkpoint's state.
    pub fn restore(&mut self, state: WriterState) -> Result<()> {
        self.next_seq = state.meta.next_seq;
        self.schema = state.schema;
        self.buffered_rows = state.rows.iter().map(RecordBatch::num_rows).sum();
        self.pending_since_ms = (self.buffered_rows > 0).then(now_ms);
        self.buffer = state.rows;
        if let Some(open) = state.meta.open {
            let schema = self.schema.clone().ok_or_else(|| {
                Error::Corrupt(format!(
                    "parquet sink '{}': the checkpoint has an open file but no schema",
                    self.uid
                ))
            })?;
            let encoder = FileEncoder::resume(
                schema,
                self.options.writer_properties(),
                &state.row_groups,
                open.emitted,
            )
            .map_err(|e| self.parquet_error("resuming the open file", e))?;
            FileResumed {
                file: &self.file_name(open.seq),
                parts: open.parts.len(),
                taken_over_bytes: None,
            }
            .emit();
            self.open = Some(OpenFile {
                seq: open.seq,
                parts: open.parts,
                encoder,
                tail: state.tail,
                opened_at_ms: open.opened_at_ms,
            });
        }
        Ok(())
    }

    /// The file the rows this writer carries (an open file, or rows
    /// waiting for one) are published as, if it carries any.
    pub fn carried_file(&self) -> Option<String> {
        match &self.open {
            Some(open) => Some(self.file_name(open.seq)),
            None if self.buffered_rows > 0 => Some(self.file_name(self.next_seq)),
            None => None,
        }
    }

    /// Drops what the writer carries, which [`carried_file`](Self::carried_file)
    /// shows was published whole already: a rescale closed it (see
    /// `ParquetSink::rescale`), and the same checkpoint is restored again.
    pub fn forget_carried(&mut self) {
        let used = self.open.take().map_or(self.next_seq, |open| open.seq);
        self.next_seq = self.next_seq.max(used + 1);
        self.buffer.clear();
        self.buffered_rows = 0;
        self.pending_since_ms = None;
    }

    /// The sequence number the next file of this writer takes.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Moves a multipart file resumed from the checkpoint into an upload of
    /// this run's own (see [`Uploader::take_over`]): its parts so far are read
    /// back, put in front of the checkpoint's tail, and uploaded again as
    /// whole parts. Costs one read and one write of the bytes uploaded so far
    /// (at most the target file size) per writer and restart.
    pub async fn take_over_upload(&mut self) -> Result<()> {
        let Some(mut file) = self.open.take() else {
            return Ok(());
        };
        let uploaded = file.encoder.emitted() - file.tail.len() as u64;
        let staging = self.staging_name(file.seq);
        let taken = self
            .uploader
            .take_over(&staging, &file.parts, uploaded)
            .await;
        match taken {
            Ok(Some((parts, mut bytes))) => {
                FileResumed {
                    file: &self.file_name(file.seq),
                    parts: 0,
                    taken_over_bytes: Some(bytes.len()),
                }
                .emit();
                bytes.extend_from_slice(&file.tail);
                file.parts = parts;
                file.tail = bytes;
                while file.tail.len() >= self.options.part_bytes {
                    let rest = file.tail.split_off(self.options.part_bytes);
                    let part = std::mem::replace(&mut file.tail, rest);
                    self.put_part(file.seq, &mut file.parts, part).await?;
                }
            }
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        self.open = Some(file);
        Ok(())
    }

    /// Deletes this subtask's staged parts that the state does not list: the
    /// leftovers of a run that crashed after its last completed checkpoint
    /// (and, on a local folder, its killed writes' temporary files).
    pub async fn discard_unreferenced_parts(&mut self) -> Result<()> {
        let staging = format!("{STAGING}/{}", self.uid);
        let mine = format!("{:04}-", self.subtask);
        self.uploader.delete_local_temporaries(&staging, &mine)?;
        let files = format!("part-{}-{:04}-", self.uid, self.subtask);
        self.uploader.delete_local_temporaries("", &files)?;
        let keep: Vec<_> = self
            .open
            .iter()
            .flat_map(|f| f.parts.staged())
            .map(|p| self.uploader.path(&p))
            .collect();
        for object in self.uploader.list(&staging).await? {
            let name = object.filename().unwrap_or_default();
            if name.starts_with(&mine) && !keep.contains(&object) {
                LeftoverDeleted {
                    file: object.as_ref(),
                    what: "an unreferenced staged part",
                }
                .emit();
                self.uploader.delete(&object).await?;
            }
        }
        Ok(())
    }

    fn check_schema(&mut self, batch: &RecordBatch) -> Result<()> {
        match &self.schema {
            None => {
                self.schema = Some(batch.schema());
                Ok(())
            }
            Some(schema) if schema.fields() == batch.schema().fields() => Ok(()),
            Some(schema) => Err(Error::BadInput(format!(
                "parquet sink '{}': a batch with columns {:?} arrived after batches with {:?}; \
                 every batch of one sink must have the same columns and types",
                self.uid,
                batch.schema().fields(),
                schema.fields()
            ))),
        }
    }

    async fn open_file(&mut self) -> Result<OpenFile> {
        let schema = self.schema.clone().expect("a batch set the schema");
        let seq = self.next_seq;
        self.next_seq += 1;
        let parts = self.uploader.start(&self.staging_name(seq)).await?;
        let encoder = FileEncoder::new(schema, self.options.writer_properties())
            .map_err(|e| self.parquet_error("starting a file", e))?;
        Ok(OpenFile {
            seq,
            parts,
            encoder,
            tail: Vec::new(),
            opened_at_ms: self.pending_since_ms.take().unwrap_or_else(now_ms),
        })
    }

    /// Encodes the buffered rows as a row group of the open file, uploads
    /// full parts, and finishes the file once it reaches the target size.
    async fn flush_row_group(&mut self) -> Result<()> {
        if self.buffered_rows == 0 {
            return Ok(());
        }
        let mut file = match self.open.take() {
            Some(file) => file,
            None => self.open_file().await?,
        };
        let rows = std::mem::take(&mut self.buffer);
        self.buffered_rows = 0;
        if let Err(e) = file.encoder.write_row_group(&rows) {
            return Err(self.parquet_error("encoding a row group", e));
        }
        if file.tail.capacity() == 0 {
            // A part is uploaded once it holds part_bytes: allocate that once
            // (with room for the row group that crosses it), not by doubling.
            file.tail
                .reserve_exact(self.options.part_bytes + self.options.part_bytes / 4);
        }
        file.encoder.append_bytes_to(&mut file.tail);
        if file.tail.len() >= self.options.part_bytes {
            self.upload_tail(&mut file).await?;
        }
        if file.encoder.bytes_so_far() >= self.options.target_file_bytes {
            self.finish_file(file).await
        } else {
            self.open = Some(file);
            Ok(())
        }
    }

    /// Uploads the file's tail as its next part.
    async fn upload_tail(&mut self, file: &mut OpenFile) -> Result<()> {
        let bytes = std::mem::take(&mut file.tail);
        self.put_part(file.seq, &mut file.parts, bytes).await
    }

    // Takes `&mut self`, not `&self`: the writer holds an encoder that is
    // `Send` but not `Sync`, and a shared borrow would make the future `!Send`.
    async fn put_part(&mut self, seq: u64, parts: &mut Parts, bytes: Vec<u8>) -> Result<()> {
        let name = self.file_name(seq);
        let staging = self.staging_name(seq);
        self.uploader.put_part(&name, &staging, parts, bytes).await
    }

    async fn finish_file(&mut self, file: OpenFile) -> Result<()> {
        let OpenFile {
            seq,
            mut parts,
            encoder,
            mut tail,
            ..
        } = file;
        let rows = encoder.rows();
        let footer = encoder
            .finish()
            .map_err(|e| self.parquet_error("finishing a file", e))?;
        tail.extend(footer);
        self.put_part(seq, &mut parts, tail).await?;
        let name = self.file_name(seq);
        FileFinished {
            uid: &self.uid,
            subtask: self.subtask,
            file: &name,
            rows,
            parts: parts.len(),
        }
        .emit();
        self.finished.push(FinishedFile { file: name, parts });
        Ok(())
    }

    /// Whether the open file (or the rows waiting for one) passed the age limit.
    fn too_old(&self) -> bool {
        let since = match &self.open {
            Some(file) => Some(file.opened_at_ms),
            None => self.pending_since_ms.filter(|_| self.buffered_rows > 0),
        };
        match (since, self.options.max_file_age) {
            (Some(since), Some(age)) => {
                Duration::from_millis(now_ms().saturating_sub(since)) >= age
            }
            _ => false,
        }
    }
}

#[async_trait]
impl SinkWriter for ParquetSinkWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.check_schema(&batch)?;
        if self.open.is_none() && self.buffered_rows == 0 {
            self.pending_since_ms = Some(now_ms());
        }
        self.buffered_rows += batch.num_rows();
        self.buffer.push(batch);
        if self.buffered_rows >= self.options.max_row_group_rows {
            self.flush_row_group().await?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, _checkpoint: CheckpointId) -> Result<Option<serde_json::Value>> {
        // Close the row group being filled, before the handle is built (it
        // may finish a file, which must commit with this checkpoint): the
        // snapshot then carries encoded bytes instead of a copy of the raw
        // rows, which at 1 s intervals was most of the sink's peak memory.
        self.flush_row_group().await?;
        if self.too_old() {
            self.flush_row_group().await?;
            if let Some(file) = self.open.take() {
                self.finish_file(file).await?;
            }
        }
        if self.finished.is_empty() {
            return Ok(None);
        }
        let payload = Payload {
            files: std::mem::take(&mut self.finished),
        };
        let payload = serde_json::to_value(payload)
            .map_err(|e| Error::Internal(format!("commit handle does not serialise: {e}")))?;
        Ok(Some(payload))
    }

    async fn finish(&mut self) -> Result<()> {
        self.flush_row_group().await?;
        if let Some(file) = self.open.take() {
            self.finish_file(file).await?;
        }
        Ok(())
    }

    async fn snapshot(&mut self) -> Result<Option<RecordBatch>> {
        let mut open = self.open.take();
        if let Some(file) = &mut open {
            // Upload what an object store accepts as a part; keep the rest in
            // the checkpoint. Staged parts have no minimum.
            let staged = matches!(file.parts, Parts::Staged { .. });
            if !file.tail.is_empty() && (staged || file.tail.len() >= MIN_PART_BYTES) {
                self.upload_tail(file).await?;
            }
        }
        let state = WriterState {
            meta: WriterMeta {
                next_seq: self.next_seq,
                open: open.as_ref().map(|f| OpenMeta {
                    seq: f.seq,
                    parts: f.parts.clone(),
                    emitted: f.encoder.emitted(),
                    opened_at_ms: f.opened_at_ms,
                }),
            },
            row_groups: match &open {
                Some(f) => f
                    .encoder
                    .row_group_metadata()
                    .map_err(|e| self.parquet_error("describing the open file", e))?,
                None => Vec::new(),
            },
            tail: open.as_ref().map(|f| f.tail.clone()).unwrap_or_default(),
            schema: self.schema.clone(),
            rows: self.buffer.clone(),
        };
        self.open = open;
        Ok(Some(state.encode()?))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    fn batch(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let ids: Int64Array = (from..from + rows).collect();
        RecordBatch::try_new(schema, vec![Arc::new(ids)]).unwrap()
    }

    fn writer(store: &Arc<InMemory>, options: ParquetSinkOptions) -> ParquetSinkWriter {
        writer_at(store, options, 1)
    }

    fn writer_at(
        store: &Arc<InMemory>,
        options: ParquetSinkOptions,
        epoch: u64,
    ) -> ParquetSinkWriter {
        let uploader = Uploader {
            store: store.clone(),
            multipart: Some(store.clone()),
            root: "out".into(),
            local_root: None,
        };
        ParquetSinkWriter::new(uploader, options, "sink".into(), 0, epoch)
    }

    async fn commit(store: &Arc<InMemory>, payload: serde_json::Value) -> Vec<String> {
        let payload: Payload = serde_json::from_value(payload).unwrap();
        let w = writer(store, ParquetSinkOptions::default());
        let mut names = Vec::new();
        for file in payload.files {
            w.uploader.complete(&file.file, &file.parts).await.unwrap();
            // Twice: a commit repeated on restore changes nothing.
            w.uploader.complete(&file.file, &file.parts).await.unwrap();
            names.push(file.file);
        }
        names
    }

    async fn read_ids(store: &Arc<InMemory>, name: &str) -> Vec<i64> {
        let bytes = store
            .get(&format!("out/{name}").as_str().into())
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        reader
            .flat_map(|b| {
                b.unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_file_carried_across_checkpoints_and_a_crash_comes_out_whole() {
        let store = Arc::new(InMemory::new());
        let options = ParquetSinkOptions {
            max_row_group_rows: 1000,
            ..ParquetSinkOptions::default()
        };
        let mut first = writer(&store, options.clone());
        first.write(batch(0, 2500)).await.unwrap();
        // Far below the target size: nothing to commit, the file is carried.
        assert_eq!(first.pre_commit(CheckpointId(1)).await.unwrap(), None);
        let state = first.snapshot().await.unwrap().unwrap();
        first.write(batch(2500, 700)).await.unwrap(); // lost with the crash
        drop(first);

        let mut second = writer(&store, options);
        second
            .restore(WriterState::decode(&state).unwrap())
            .unwrap();
        second.write(batch(2500, 1500)).await.unwrap();
        second.finish().await.unwrap();
        let payload = second.pre_commit(CheckpointId(2)).await.unwrap().unwrap();
        let names = commit(&store, payload).await;
        assert_eq!(names, vec!["part-sink-0000-000000.parquet".to_string()]);
        assert_eq!(
            read_ids(&store, &names[0]).await,
            (0..4000).collect::<Vec<_>>()
        );
    }

    /// Ids that do not compress: 8 bytes a row in the file.
    fn noise(from: i64, rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let ids: Int64Array = (from..from + rows)
            .map(|i| tidewater_core::splitmix64(i as u64) as i64)
            .collect();
        RecordBatch::try_new(schema, vec![Arc::new(ids)]).unwrap()
    }

    #[tokio::test]
    async fn a_resumed_upload_is_taken_over_and_a_woken_predecessor_cannot_touch_it() {
        let store = Arc::new(InMemory::new());
        let options = ParquetSinkOptions {
            max_row_group_rows: 100_000,
            part_bytes: MIN_PART_BYTES,
            ..ParquetSinkOptions::default()
        };
        let mut first = writer_at(&store, options.clone(), 1);
        first.write(noise(0, 1_000_000)).await.unwrap();
        assert_eq!(first.pre_commit(CheckpointId(1)).await.unwrap(), None);
        let state = first.snapshot().await.unwrap().unwrap();
        // The predecessor goes on after the checkpoint and uploads another
        // part into the same upload before the successor takes it over.
        first.write(noise(1_000_000, 1_000_000)).await.unwrap();

        let mut second = writer_at(&store, options, 2);
        second
            .restore(WriterState::decode(&state).unwrap())
            .unwrap();
        second.take_over_upload().await.unwrap();
        // Woken again: its upload is complete, its next part is refused.
        let refused = first.write(noise(2_000_000, 1_000_000)).await;
        assert!(refused.is_err(), "the predecessor could still upload");

        second.write(noise(1_000_000, 500_000)).await.unwrap();
        second.finish().await.unwrap();
        let payload = second.pre_commit(CheckpointId(2)).await.unwrap().unwrap();
        let names = commit(&store, payload).await;
        assert_eq!(names, vec!["part-sink-0000-000000.parquet".to_string()]);
        let want: Vec<i64> = (0..1_500_000)
            .map(|i| tidewater_core::splitmix64(i as u64) as i64)
            .collect();
        assert!(
            read_ids(&store, &names[0]).await == want,
            "the file is not the checkpoint's rows followed by the successor's"
        );
        // Nothing staged is left once the file is published.
        let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
            object_store::ObjectStore::list(store.as_ref(), Some(&"out/_staging".into())),
        )
        .await
        .unwrap();
        assert!(left.is_empty(), "staging objects left: {left:?}");
    }

    #[tokio::test]
    async fn a_file_older_than_the_age_limit_is_finished_at_the_checkpoint() {
        let store = Arc::new(InMemory::new());
        let mut w = writer(
            &store,
            ParquetSinkOptions {
                max_row_group_rows: 100,
                max_file_age: Some(Duration::ZERO),
                ..ParquetSinkOptions::default()
            },
        );
        w.write(batch(0, 150)).await.unwrap();
        let payload = w.pre_commit(CheckpointId(1)).await.unwrap().unwrap();
        let names = commit(&store, payload).await;
        assert_eq!(
            read_ids(&store, &names[0]).await,
            (0..150).collect::<Vec<_>>()
        );
        // The next file takes the next number.
        w.write(batch(150, 10)).await.unwrap();
        let payload = w.pre_commit(CheckpointId(2)).await.unwrap().unwrap();
        assert_eq!(
            commit(&store, payload).await,
            vec!["part-sink-0000-000001.parquet".to_string()]
        );
    }
}
