//! The two-phase-commit Parquet sink.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::TryStreamExt;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::AsyncArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use tidewater_core::{
    CheckpointId, CommitHandle, Error, Result, Sink, SinkWriter, StoreLocation, TaskContext,
    open_location,
};
use tracing::debug;

const STAGING: &str = "_staging";

/// How the sink writes files.
#[derive(Debug, Clone)]
pub struct ParquetSinkOptions {
    /// Compression (default zstd level 1: the smallest files for the CPU).
    pub compression: Compression,
    /// Rows per row group (default 128Ki): bounds the writer's memory.
    pub max_row_group_rows: usize,
    /// A file is closed once it reaches this many bytes (default 128 MiB).
    pub target_file_bytes: usize,
}

impl Default for ParquetSinkOptions {
    fn default() -> Self {
        ParquetSinkOptions {
            compression: Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1 is valid")),
            max_row_group_rows: 128 * 1024,
            target_file_bytes: 128 * 1024 * 1024,
        }
    }
}

/// Writes `*.parquet` files directly under a folder or object-store prefix,
/// visible only once committed.
///
/// Committed files are named `part-{uid}-{subtask}-{checkpoint}-{n}.parquet`;
/// staged files live under `_staging/{uid}/` until their checkpoint completes.
#[derive(Debug, Clone)]
pub struct ParquetSink {
    location: StoreLocation,
    options: ParquetSinkOptions,
}

impl ParquetSink {
    /// A sink writing under `location` (a folder, `file://` or `memory://` URL).
    pub fn open(location: &str) -> Result<Self> {
        Ok(Self::new(open_location(location)?))
    }

    /// A sink writing into an opened store.
    pub fn new(location: StoreLocation) -> Self {
        ParquetSink {
            location,
            options: ParquetSinkOptions::default(),
        }
    }

    /// Sets the writing options.
    pub fn with_options(mut self, options: ParquetSinkOptions) -> Self {
        self.options = options;
        self
    }

    fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.location.store
    }

    fn path(&self, relative: &str) -> Path {
        let mut path = self.location.prefix.clone();
        for part in relative.split('/') {
            path = path.join(part);
        }
        path
    }
}

/// One staged file and the name it takes when committed, relative to the sink's root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StagedFile {
    staged: String,
    committed: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payload {
    files: Vec<StagedFile>,
}

fn payload_of(handle: &CommitHandle) -> Result<Payload> {
    serde_json::from_value(handle.payload.clone()).map_err(|e| {
        Error::Corrupt(format!(
            "parquet sink '{}': commit handle of checkpoint {} is not valid: {e}",
            handle.uid, handle.checkpoint
        ))
    })
}

fn external(what: String, error: impl std::fmt::Display) -> Error {
    Error::External {
        message: format!("{what}: {error}"),
        retryable: true,
    }
}

#[async_trait]
impl Sink for ParquetSink {
    fn kind(&self) -> &str {
        "parquet"
    }

    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        let props = WriterProperties::builder()
            .set_compression(self.options.compression)
            .set_max_row_group_row_count(Some(self.options.max_row_group_rows))
            .build();
        // Staged names only need to differ between runs; committed names are deterministic.
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default()
            ^ u64::from(std::process::id());
        Ok(Box::new(ParquetSinkWriter {
            sink: self.clone(),
            uid: ctx.uid.to_string(),
            subtask: ctx.subtask,
            props,
            run: format!("{run:016x}"),
            seq: 0,
            current: None,
            staged: Vec::new(),
        }))
    }

    async fn commit(&self, handle: &CommitHandle) -> Result<()> {
        for file in payload_of(handle)?.files {
            let staged = self.path(&file.staged);
            let committed = self.path(&file.committed);
            match self.store().rename(&staged, &committed).await {
                Ok(()) => debug!(file = %committed, "committed"),
                Err(object_store::Error::NotFound { .. }) => {
                    // Committed before a crash: the rename happened, the staged file is gone.
                    self.store().head(&committed).await.map_err(|e| {
                        Error::Corrupt(format!(
                            "parquet sink '{}': checkpoint {} staged '{}', which is gone, and \
                             '{}' does not exist either ({e}); was the _staging folder removed by hand?",
                            handle.uid, handle.checkpoint, file.staged, file.committed
                        ))
                    })?;
                }
                Err(e) => return Err(external(format!("publishing '{committed}'"), e)),
            }
        }
        Ok(())
    }

    async fn abort_uncommitted(&self, _job: &str, uid: &str) -> Result<()> {
        let dir = self.path(&format!("{STAGING}/{uid}"));
        let leftovers: Vec<_> = self
            .store()
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| external(format!("listing '{dir}'"), e))?;
        for object in leftovers {
            debug!(file = %object.location, "deleting uncommitted file");
            match self.store().delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(external(format!("deleting '{}'", object.location), e)),
            }
        }
        Ok(())
    }

    async fn revert(&self, handle: &CommitHandle) -> Result<()> {
        for file in payload_of(handle)?.files {
            let committed = self.path(&file.committed);
            match self.store().delete(&committed).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(external(format!("deleting '{committed}'"), e)),
            }
        }
        Ok(())
    }
}

struct OpenFile {
    writer: AsyncArrowWriter<BufWriter>,
    staged: String,
}

struct ParquetSinkWriter {
    sink: ParquetSink,
    uid: String,
    subtask: usize,
    props: WriterProperties,
    run: String,
    seq: u64,
    current: Option<OpenFile>,
    /// Files closed since the last pre-commit.
    staged: Vec<String>,
}

impl ParquetSinkWriter {
    async fn open(&mut self, batch: &RecordBatch) -> Result<OpenFile> {
        self.seq += 1;
        let staged = format!(
            "{STAGING}/{}/{:04}-{}-{:06}.parquet",
            self.uid, self.subtask, self.run, self.seq
        );
        let object = BufWriter::new(self.sink.store().clone(), self.sink.path(&staged));
        let writer = AsyncArrowWriter::try_new(object, batch.schema(), Some(self.props.clone()))
            .map_err(|e| external(format!("creating '{staged}'"), e))?;
        Ok(OpenFile { writer, staged })
    }

    async fn close_current(&mut self) -> Result<()> {
        if let Some(file) = self.current.take() {
            file.writer
                .close()
                .await
                .map_err(|e| external(format!("closing '{}'", file.staged), e))?;
            self.staged.push(file.staged);
        }
        Ok(())
    }
}

#[async_trait]
impl SinkWriter for ParquetSinkWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<()> {
        if self.current.is_none() {
            self.current = Some(self.open(&batch).await?);
        }
        let file = self.current.as_mut().expect("opened above");
        file.writer.write(&batch).await.map_err(|e| {
            Error::BadInput(format!(
                "parquet sink '{}': cannot write batch to '{}': {e}",
                self.uid, file.staged
            ))
        })?;
        if file.writer.bytes_written() + file.writer.in_progress_size()
            >= self.sink.options.target_file_bytes
        {
            self.close_current().await?;
        }
        Ok(())
    }

    async fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<Option<serde_json::Value>> {
        self.close_current().await?;
        if self.staged.is_empty() {
            return Ok(None);
        }
        let files = std::mem::take(&mut self.staged)
            .into_iter()
            .enumerate()
            .map(|(n, staged)| StagedFile {
                staged,
                committed: format!(
                    "part-{}-{:04}-{:020}-{n:04}.parquet",
                    self.uid, self.subtask, checkpoint.0
                ),
            })
            .collect();
        let payload = serde_json::to_value(Payload { files })
            .map_err(|e| Error::Internal(format!("commit handle does not serialise: {e}")))?;
        Ok(Some(payload))
    }
}
