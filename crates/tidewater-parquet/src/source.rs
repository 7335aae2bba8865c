//! The resumable Parquet source: every file under a prefix, split by row
//! group, with a cursor that counts the rows already emitted, so a restart
//! resumes inside a row group rather than at the start of a file.

use std::collections::HashMap;
use std::sync::Arc;

use crate::object_reader::ObjectReader;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use globset::{Glob, GlobMatcher};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::ParquetRecordBatchStream;
use serde::{Deserialize, Serialize};
use tidewater_core::events::{InputDeadLettered, InternalEvent, SourcePlanned};
use tidewater_core::{
    Cursor, Error, Result, Source, Split, SplitReader, StoreLocation, open_location,
};

/// What the source does with a file it cannot read.
#[derive(Debug, Clone, Default)]
pub enum OnCorruptFile {
    /// Fail the job, naming the file (the default).
    #[default]
    Fail,
    /// Skip what cannot be read and record it under this location (a folder
    /// or URL) as `{file}.json`: the file, the row group (if any) and the error.
    DeadLetter(String),
}

/// Builds a [`ParquetSource`].
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> tidewater_core::Result<()> {
/// use tidewater_parquet::ParquetSource;
///
/// let source = ParquetSource::builder("s3://lake/events/2026/")
///     .glob("**/*.parquet")
///     .columns(["id", "k", "v"])
///     .build()
///     .await?;
/// # let _ = source;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ParquetSourceBuilder {
    location: String,
    glob: Option<String>,
    columns: Option<Vec<String>>,
    batch_rows: usize,
    on_corrupt: OnCorruptFile,
}

impl ParquetSourceBuilder {
    /// Only the files whose path below the prefix matches `pattern` (for
    /// example `2026-*/*.parquet`). Without a glob: every `*.parquet` file,
    /// except under folders whose names start with `_` or `.`.
    pub fn glob(mut self, pattern: impl Into<String>) -> Self {
        self.glob = Some(pattern.into());
        self
    }

    /// Reads only these columns, in this order (default: all).
    pub fn columns<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    /// Rows per emitted batch (default 32Ki).
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows.max(1);
        self
    }

    /// What to do with a file that cannot be read (default: fail).
    pub fn on_corrupt_file(mut self, policy: OnCorruptFile) -> Self {
        self.on_corrupt = policy;
        self
    }

    /// Lists the files and reads their footers.
    pub async fn build(self) -> Result<ParquetSource> {
        // A location naming one file reads that file: its folder, filtered.
        let (folder, single) = match self.location.trim_end_matches('/').rsplit_once('/') {
            Some((folder, name)) if name.ends_with(".parquet") => {
                (folder.to_string(), Some(name.to_string()))
            }
            None if self.location.ends_with(".parquet") => {
                (".".to_string(), Some(self.location.clone()))
            }
            _ => (self.location.clone(), None),
        };
        let location = open_location(&folder)?;
        let dead_letters = match &self.on_corrupt {
            OnCorruptFile::Fail => None,
            OnCorruptFile::DeadLetter(at) => Some(open_location(at)?),
        };
        let matcher = match &self.glob {
            Some(pattern) => Some(
                Glob::new(pattern)
                    .map_err(|e| {
                        Error::InvalidPipeline(format!(
                            "parquet source: glob '{pattern}' is not valid: {e}"
                        ))
                    })?
                    .compile_matcher(),
            ),
            None => None,
        };
        let mut objects: Vec<_> = location
            .store
            .list(Some(&location.prefix))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list", &location.display, e))?;
        objects.sort_by(|a, b| a.location.cmp(&b.location));

        let mut files = Vec::new();
        let mut schema: Option<(SchemaRef, String)> = None;
        for object in objects {
            let relative = relative_name(&location.prefix, &object.location);
            let wanted = match &single {
                Some(name) => &relative == name,
                None => selected(&relative, matcher.as_ref()),
            };
            if !wanted {
                continue;
            }
            let mut reader =
                ObjectReader::new(location.store.clone(), object.location.clone(), object.size);
            let metadata = match ArrowReaderMetadata::load_async(
                &mut reader,
                ArrowReaderOptions::new(),
            )
            .await
            {
                Ok(metadata) => metadata,
                Err(e) => {
                    let error = format!(
                        "'{relative}' is not a readable Parquet file: {e}; remove it or \
                             narrow the glob, or configure a dead-letter location to skip such files"
                    );
                    record_bad_file(dead_letters.as_ref(), &relative, None, &error).await?;
                    continue;
                }
            };
            let (projection, file_schema) =
                projection(&metadata, self.columns.as_deref(), &relative)?;
            match &schema {
                None => schema = Some((file_schema, relative.clone())),
                Some((first, first_file)) if first.fields() != file_schema.fields() => {
                    return Err(Error::BadInput(format!(
                        "parquet source: '{relative}' has columns {:?}, but '{first_file}' has {:?}; \
                         all files must share a schema (select common columns with .columns(...))",
                        field_list(&file_schema),
                        field_list(first)
                    )));
                }
                Some(_) => {}
            }
            files.push(FilePlan {
                relative,
                path: object.location,
                size: object.size,
                metadata,
                projection,
            });
        }
        let Some((schema, _)) = schema else {
            return Err(Error::InvalidPipeline(format!(
                "parquet source: no Parquet files under '{}'{}; check the URL{}",
                location.display,
                self.glob
                    .as_deref()
                    .map(|g| format!(" match '{g}'"))
                    .unwrap_or_default(),
                if self.glob.is_some() {
                    " and the glob"
                } else {
                    ""
                }
            )));
        };
        let mut splits = Vec::new();
        let mut by_id = HashMap::new();
        for (f, file) in files.iter().enumerate() {
            for (g, group) in file.metadata.metadata().row_groups().iter().enumerate() {
                let id = format!("{}#{g}", file.relative);
                by_id.insert(id.clone(), (f, g));
                splits.push(Split {
                    id,
                    estimated_rows: Some(group.num_rows() as u64),
                });
            }
        }
        SourcePlanned {
            kind: "parquet",
            files: files.len(),
            splits: splits.len(),
            rows: splits.iter().filter_map(|s| s.estimated_rows).sum::<u64>(),
        }
        .emit();
        Ok(ParquetSource {
            inner: Arc::new(Inner {
                location,
                files,
                splits,
                by_id,
                schema,
                batch_rows: self.batch_rows,
                dead_letters,
            }),
        })
    }
}

/// Reads every Parquet file under a folder or object-store prefix.
///
/// Splits are row groups (id `{file}#{row group}`, assigned round-robin to
/// the subtasks); a split's cursor is `{"file", "row_group", "rows"}`, the
/// rows already emitted. The files are listed once, at build: a restore
/// whose files differ from the checkpoint's is refused.
#[derive(Debug, Clone)]
pub struct ParquetSource {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    location: StoreLocation,
    files: Vec<FilePlan>,
    splits: Vec<Split>,
    by_id: HashMap<String, (usize, usize)>,
    schema: SchemaRef,
    batch_rows: usize,
    dead_letters: Option<StoreLocation>,
}

#[derive(Debug)]
struct FilePlan {
    relative: String,
    path: Path,
    size: u64,
    metadata: ArrowReaderMetadata,
    projection: ProjectionMask,
}

impl ParquetSource {
    /// Starts building a source over the files under `location` (a folder or
    /// URL), or over one file when `location` names a `*.parquet` file.
    pub fn builder(location: impl Into<String>) -> ParquetSourceBuilder {
        ParquetSourceBuilder {
            location: location.into(),
            glob: None,
            columns: None,
            batch_rows: 32 * 1024,
            on_corrupt: OnCorruptFile::Fail,
        }
    }

    /// The files this source reads, relative to its prefix.
    pub fn files(&self) -> Vec<&str> {
        self.inner
            .files
            .iter()
            .map(|f| f.relative.as_str())
            .collect()
    }

    /// Rows in all files, from their footers.
    pub fn total_rows(&self) -> u64 {
        self.inner
            .splits
            .iter()
            .filter_map(|s| s.estimated_rows)
            .sum()
    }
}

/// Where a row-group reader stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RowGroupCursor {
    file: String,
    row_group: usize,
    rows: u64,
}

#[async_trait]
impl Source for ParquetSource {
    fn kind(&self) -> &str {
        "parquet"
    }

    fn schema(&self) -> SchemaRef {
        self.inner.schema.clone()
    }

    async fn splits(&self) -> Result<Vec<Split>> {
        Ok(self.inner.splits.clone())
    }

    async fn open(&self, split: &Split, cursor: Option<&Cursor>) -> Result<Box<dyn SplitReader>> {
        let inner = &self.inner;
        let &(f, g) = inner.by_id.get(&split.id).ok_or_else(|| {
            Error::Internal(format!("parquet source: unknown split '{}'", split.id))
        })?;
        let file = &inner.files[f];
        let skip = match cursor {
            None => 0,
            Some(cursor) => {
                let cursor: RowGroupCursor =
                    serde_json::from_value(cursor.clone()).map_err(|e| {
                        Error::Corrupt(format!(
                            "parquet source: cursor of split '{}' is not valid: {e}",
                            split.id
                        ))
                    })?;
                if cursor.file != file.relative || cursor.row_group != g {
                    return Err(Error::Corrupt(format!(
                        "parquet source: the cursor of split '{}' points at '{}' row group {}",
                        split.id, cursor.file, cursor.row_group
                    )));
                }
                cursor.rows
            }
        };
        let reader = ObjectReader::new(inner.location.store.clone(), file.path.clone(), file.size);
        let stream =
            ParquetRecordBatchStreamBuilder::new_with_metadata(reader, file.metadata.clone())
                .with_row_groups(vec![g])
                .with_projection(file.projection.clone())
                .with_batch_size(inner.batch_rows)
                .with_offset(skip as usize)
                .build()
                .map_err(|e| read_error(&file.relative, g, e))?;
        Ok(Box::new(RowGroupReader {
            stream: Some(stream),
            source: self.inner.clone(),
            file: f,
            row_group: g,
            rows: skip,
        }))
    }
}

struct RowGroupReader {
    stream: Option<ParquetRecordBatchStream<ObjectReader>>,
    source: Arc<Inner>,
    file: usize,
    row_group: usize,
    rows: u64,
}

#[async_trait]
impl SplitReader for RowGroupReader {
    async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let Some(stream) = &mut self.stream else {
            return Ok(None);
        };
        match stream.next().await {
            Some(Ok(batch)) => {
                self.rows += batch.num_rows() as u64;
                Ok(Some(batch))
            }
            None => Ok(None),
            Some(Err(e)) => {
                let file = &self.source.files[self.file];
                let error = read_error(&file.relative, self.row_group, e);
                if self.source.dead_letters.is_none() {
                    return Err(error);
                }
                // Skip the rest of this row group; the rows before the damage stay emitted.
                self.stream = None;
                record_bad_file(
                    self.source.dead_letters.as_ref(),
                    &file.relative,
                    Some(self.row_group),
                    &error.to_string(),
                )
                .await?;
                Ok(None)
            }
        }
    }

    fn cursor(&self) -> Cursor {
        let cursor = RowGroupCursor {
            file: self.source.files[self.file].relative.clone(),
            row_group: self.row_group,
            rows: self.rows,
        };
        serde_json::to_value(cursor).unwrap_or_default()
    }
}

fn relative_name(prefix: &Path, path: &Path) -> String {
    let depth = prefix.parts().count();
    path.parts()
        .skip(depth)
        .map(|p| p.as_ref().to_string())
        .collect::<Vec<_>>()
        .join("/")
}

fn selected(relative: &str, glob: Option<&GlobMatcher>) -> bool {
    match glob {
        Some(glob) => glob.is_match(relative),
        None => {
            let mut parts: Vec<&str> = relative.split('/').collect();
            let name = parts.pop().unwrap_or_default();
            name.ends_with(".parquet")
                && !name.starts_with('.')
                && parts
                    .iter()
                    .all(|p| !p.starts_with('_') && !p.starts_with('.'))
        }
    }
}

/// The mask that reads `columns` (all when `None`) and the schema it yields.
fn projection(
    metadata: &ArrowReaderMetadata,
    columns: Option<&[String]>,
    file: &str,
) -> Result<(ProjectionMask, SchemaRef)> {
    let schema = metadata.schema();
    let Some(columns) = columns else {
        return Ok((ProjectionMask::all(), schema.clone()));
    };
    let mut roots = Vec::with_capacity(columns.len());
    for column in columns {
        let index = schema.index_of(column).map_err(|_| {
            Error::BadInput(format!(
                "parquet source: '{file}' has no column '{column}' (it has {:?})",
                schema.fields().iter().map(|f| f.name()).collect::<Vec<_>>()
            ))
        })?;
        roots.push(index);
    }
    // The reader yields the columns in file order, whatever order was asked.
    let mut ordered = roots.clone();
    ordered.sort_unstable();
    ordered.dedup();
    let descr = metadata.metadata().file_metadata().schema_descr();
    Ok((
        ProjectionMask::roots(descr, ordered.iter().copied()),
        Arc::new(schema.project(&ordered)?),
    ))
}

fn field_list(schema: &SchemaRef) -> Vec<String> {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect()
}

fn read_error(file: &str, row_group: usize, e: impl std::fmt::Display) -> Error {
    Error::BadInput(format!(
        "parquet source: cannot read '{file}' row group {row_group}: {e}; the file may be \
         damaged: replace it, or configure a dead-letter location to skip what cannot be read"
    ))
}

/// Fails with `error`, or records the file as a dead letter and carries on.
async fn record_bad_file(
    dead_letters: Option<&StoreLocation>,
    file: &str,
    row_group: Option<usize>,
    error: &str,
) -> Result<()> {
    let Some(at) = dead_letters else {
        return Err(Error::BadInput(format!("parquet source: {error}")));
    };
    InputDeadLettered {
        file,
        row_group,
        error,
    }
    .emit();
    let record = serde_json::json!({ "file": file, "row_group": row_group, "error": error });
    let name = match row_group {
        Some(g) => format!("{}#{g}.json", file.replace('/', "__")),
        None => format!("{}.json", file.replace('/', "__")),
    };
    let path = at.prefix.clone().join(name.as_str());
    at.store
        .put(&path, PutPayload::from(record.to_string().into_bytes()))
        .await
        .map_err(|e| Error::storage("write dead letter", &path, e))?;
    Ok(())
}
