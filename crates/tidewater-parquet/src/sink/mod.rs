//! The two-phase-commit Parquet sink whose file size does not depend on the
//! checkpoint interval.
//!
//! A file grows across checkpoints until it reaches the target size (or the
//! age limit); at each checkpoint the writer uploads what it can as parts and
//! checkpoints the rest (see [`state`]). A finished file is listed in the
//! next checkpoint's commit handle and becomes visible only when that
//! checkpoint's commit completes its upload.

mod encoder;
mod state;
mod upload;
mod writer;

use std::time::Duration;

use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde::{Deserialize, Serialize};
use tidewater_core::events::{CarriedFileAlreadyPublished, InternalEvent};
use tidewater_core::{
    CheckpointId, CommitHandle, Error, Result, Sink, SinkWriter, StoreLocation, TaskContext,
    open_location,
};

use self::state::{STATE_VERSION, WriterState};
use self::upload::{Parts, Uploader};
use self::writer::ParquetSinkWriter;

/// Where staged parts live, relative to the sink's root.
const STAGING: &str = "_staging";

/// How the sink writes files.
#[derive(Debug, Clone)]
pub struct ParquetSinkOptions {
    /// Compression (default zstd level 1: the smallest files for the CPU).
    pub compression: Compression,
    /// Rows per row group (default 128Ki): bounds the rows a writer buffers
    /// and checkpoints.
    pub max_row_group_rows: usize,
    /// A file is finished once it reaches this many bytes (default 128 MiB),
    /// whatever the checkpoint interval.
    pub target_file_bytes: u64,
    /// A file is also finished at the first checkpoint after it is this old
    /// (default: no age limit), so that a slow stream still shows up.
    pub max_file_age: Option<Duration>,
    /// Bytes per uploaded part (default 8 MiB, at least 5 MiB: S3's minimum).
    pub part_bytes: usize,
}

impl Default for ParquetSinkOptions {
    fn default() -> Self {
        ParquetSinkOptions {
            compression: Compression::ZSTD(ZstdLevel::try_new(1).expect("level 1 is valid")),
            max_row_group_rows: 128 * 1024,
            target_file_bytes: 128 * 1024 * 1024,
            max_file_age: None,
            part_bytes: 8 * 1024 * 1024,
        }
    }
}

impl ParquetSinkOptions {
    fn writer_properties(&self) -> WriterProperties {
        WriterProperties::builder()
            .set_compression(self.compression)
            .set_max_row_group_row_count(None)
            // Page indexes are written when a file closes in one go; these
            // files are assembled from parts, with row-group statistics only.
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true)
            .build()
    }
}

/// What a Parquet sink writer's checkpointed state holds, in words: the
/// file it had open (its final name, the parts uploaded, the bytes encoded)
/// and the rows not yet encoded. For `tidewater checkpoints inspect`.
pub fn describe_writer_state(uid: &str, subtask: usize, state: &RecordBatch) -> Result<String> {
    let state = WriterState::decode(state)?;
    let rows: usize = state.rows.iter().map(RecordBatch::num_rows).sum();
    Ok(match &state.meta.open {
        Some(open) => format!(
            "open file part-{uid}-{subtask:04}-{:06}.parquet: {} parts uploaded, {} bytes \
             encoded, {rows} rows buffered",
            open.seq,
            open.parts.len(),
            open.emitted
        ),
        None => format!(
            "no open file ({rows} rows buffered); the next file is #{}",
            state.meta.next_seq
        ),
    })
}

/// Writes `*.parquet` files directly under a folder or object-store prefix,
/// each visible only once the checkpoint after it was finished completes.
///
/// Files are named `part-{uid}-{subtask:04}-{seq:06}.parquet`, numbered per
/// writer, so a commit repeated after a crash writes the same name; a name is
/// published once, whole (create-only on a local folder, an atomic
/// completion on object stores), and never overwritten. Staged parts (local
/// folders) live under `_staging/{uid}/`, named with the run's epoch.
///
/// # Examples
///
/// ```
/// use tidewater_parquet::{ParquetSink, ParquetSinkOptions};
///
/// let dir = tempfile::tempdir().unwrap();
/// let sink = ParquetSink::open(dir.path().to_str().unwrap())
///     .unwrap()
///     .with_options(ParquetSinkOptions {
///         target_file_bytes: 64 << 20,
///         ..ParquetSinkOptions::default()
///     });
/// # let _ = sink;
/// ```
#[derive(Clone)]
pub struct ParquetSink {
    uploader: Uploader,
    options: ParquetSinkOptions,
}

impl std::fmt::Debug for ParquetSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetSink")
            .field("root", &self.uploader.root)
            .field("options", &self.options)
            .finish()
    }
}

impl ParquetSink {
    /// A sink writing under `location` (a folder or a URL: see
    /// [`open_location`]).
    pub fn open(location: &str) -> Result<Self> {
        Ok(Self::new(open_location(location)?))
    }

    /// A sink writing into an opened store.
    pub fn new(location: StoreLocation) -> Self {
        ParquetSink {
            uploader: Uploader {
                local_root: location
                    .local_folder
                    .map(|folder| tidewater_core::local_file(&folder, location.prefix.parts())),
                store: location.store,
                multipart: location.multipart,
                root: location.prefix,
            },
            options: ParquetSinkOptions::default(),
        }
    }

    /// Sets the writing options.
    pub fn with_options(mut self, options: ParquetSinkOptions) -> Self {
        self.options = options;
        self
    }

    /// Drops what a restored writer carries when its file is published
    /// already (a rescale of the same checkpoint closed it); says whether.
    async fn forget_if_published(&self, writer: &mut ParquetSinkWriter) -> Result<bool> {
        let Some(file) = writer.carried_file() else {
            return Ok(false);
        };
        if !self.uploader.exists(&file).await? {
            return Ok(false);
        }
        CarriedFileAlreadyPublished { file: &file }.emit();
        writer.forget_carried();
        Ok(true)
    }

    fn writer(&self, ctx: &TaskContext) -> Result<ParquetSinkWriter> {
        if self.options.part_bytes < upload::MIN_PART_BYTES {
            return Err(Error::InvalidPipeline(format!(
                "parquet sink '{}': part_bytes is {}, below the 5 MiB object stores require",
                ctx.uid, self.options.part_bytes
            )));
        }
        // A file is published by one server-side copy, which S3 allows up
        // to 5 GiB; a file overshoots its target by up to a row group.
        if self.uploader.multipart.is_some() && self.options.target_file_bytes > 4 << 30 {
            return Err(Error::InvalidPipeline(format!(
                "parquet sink '{}': target_file_bytes is {}, above the 4 GiB an object store \
                 file may be here (it is published by one server-side copy, at most 5 GiB on \
                 S3): choose a smaller target",
                ctx.uid, self.options.target_file_bytes
            )));
        }
        if self.options.target_file_bytes == 0 || self.options.max_row_group_rows == 0 {
            return Err(Error::InvalidPipeline(format!(
                "parquet sink '{}': target_file_bytes and max_row_group_rows must be above 0",
                ctx.uid
            )));
        }
        Ok(ParquetSinkWriter::new(
            self.uploader.clone(),
            self.options.clone(),
            ctx.uid.to_string(),
            ctx.subtask,
            ctx.epoch.0,
        ))
    }
}

/// A finished file and its parts, as listed in a commit handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FinishedFile {
    /// The file's name, relative to the sink's root.
    file: String,
    parts: Parts,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payload {
    files: Vec<FinishedFile>,
}

fn payload_of(handle: &CommitHandle) -> Result<Payload> {
    serde_json::from_value(handle.payload.clone()).map_err(|e| {
        Error::Corrupt(format!(
            "parquet sink '{}': commit handle of checkpoint {} is not valid: {e}",
            handle.uid, handle.checkpoint
        ))
    })
}

#[async_trait]
impl Sink for ParquetSink {
    fn kind(&self) -> &str {
        "parquet"
    }

    fn state_version(&self) -> Option<u32> {
        Some(STATE_VERSION)
    }

    async fn open_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        let mut writer = self.writer(ctx)?;
        writer.discard_unreferenced_parts().await?;
        Ok(Box::new(writer))
    }

    async fn resume_writer(
        &self,
        ctx: &TaskContext,
        state: RecordBatch,
    ) -> Result<Box<dyn SinkWriter>> {
        let state = WriterState::decode(&state)
            .map_err(|e| Error::Corrupt(format!("parquet sink '{}': {e}", ctx.uid)))?;
        let mut writer = self.writer(ctx)?;
        writer.restore(state)?;
        if !self.forget_if_published(&mut writer).await? {
            writer.take_over_upload().await?;
        }
        writer.discard_unreferenced_parts().await?;
        Ok(Box::new(writer))
    }

    fn rescales(&self) -> bool {
        true
    }

    /// Each old writer's open file (and rows waiting for one) is finished
    /// and published under its own name, as if its input had ended: those
    /// rows are before the restored checkpoint, so no run writes them again.
    /// A restore of the same checkpoint finds the file published and skips
    /// it, at either parallelism. Every new writer then numbers its files
    /// past every number an old writer used, so that a subtask index that
    /// comes back after a scale-down never reuses a name.
    async fn rescale(
        &self,
        ctx: &TaskContext,
        checkpoint: CheckpointId,
        states: Vec<Option<RecordBatch>>,
    ) -> Result<Vec<Option<RecordBatch>>> {
        let mut next_seq = 0;
        for (subtask, state) in states.into_iter().enumerate() {
            let Some(state) = state else { continue };
            let state = WriterState::decode(&state)
                .map_err(|e| Error::Corrupt(format!("parquet sink '{}': {e}", ctx.uid)))?;
            let old = TaskContext {
                subtask,
                ..ctx.clone()
            };
            let mut writer = self.writer(&old)?;
            writer.restore(state)?;
            if writer.carried_file().is_some() && !self.forget_if_published(&mut writer).await? {
                writer.take_over_upload().await?;
                writer.finish().await?;
                if let Some(payload) = writer.pre_commit(checkpoint).await? {
                    let handle = CommitHandle {
                        uid: ctx.uid.to_string(),
                        subtask,
                        checkpoint,
                        payload,
                    };
                    self.commit(&handle).await?;
                }
            }
            next_seq = next_seq.max(writer.next_seq());
        }
        (0..ctx.parallelism)
            .map(|_| WriterState::fresh(next_seq).encode().map(Some))
            .collect()
    }

    async fn commit(&self, handle: &CommitHandle) -> Result<()> {
        for file in payload_of(handle)?.files {
            self.uploader.complete(&file.file, &file.parts).await?;
        }
        Ok(())
    }

    /// Nothing to do here: each writer, when it opens, deletes the staged
    /// parts of its subtask that the restored state does not list (only it
    /// knows which those are). Abandoned multipart uploads are invisible and
    /// never completed; a bucket lifecycle rule reclaims their space.
    async fn abort_uncommitted(&self, _job: &str, _uid: &str) -> Result<()> {
        Ok(())
    }

    async fn revert(&self, handle: &CommitHandle) -> Result<()> {
        for file in payload_of(handle)?.files {
            self.uploader
                .delete(&self.uploader.path(&file.file))
                .await?;
        }
        Ok(())
    }
}
