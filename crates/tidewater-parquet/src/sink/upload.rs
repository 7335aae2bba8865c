//! The upload of one output file in parts that outlive the process writing
//! them, and its completion (which makes the file visible).
//!
//! On stores with a resumable multipart API (S3, GCS, Azure, memory) the
//! parts go to a multipart upload whose id and part ids are checkpointed. The
//! upload assembles a staging object unique to the writer's epoch, which the
//! commit copies (server-side) to the file's name. A run that resumes an open
//! file does not add parts to its predecessor's upload: S3 numbers parts by
//! position, and a predecessor that was only paused could upload its own
//! next part under the same number. It completes that upload with the parts
//! its checkpoint lists (S3 drops the others), reads those bytes back, and
//! goes on in an upload of its own. On a local folder the parts are staged
//! objects under `_staging/`, concatenated into the file at commit.

use std::fmt::Display;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use tidewater_core::events::{FileAlreadyPublished, FileCommitted, InternalEvent, LeftoverDeleted};
use tidewater_core::{Error, Result};

/// The smallest part S3 accepts, other than the last.
pub(crate) const MIN_PART_BYTES: usize = 5 * 1024 * 1024;

/// Where the uploaded parts of a file are, as checkpointed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Parts {
    /// A multipart upload.
    Multipart {
        /// The upload's id.
        upload: String,
        /// The id of each part, in order.
        parts: Vec<String>,
        /// The staging object the upload assembles, relative to the sink's
        /// root; `None` in checkpoints written before staging objects, whose
        /// uploads go straight to the file's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        object: Option<String>,
        /// Staging objects of predecessors whose bytes this upload continues:
        /// deleted once the file is published.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        superseded: Vec<String>,
    },
    /// Staged objects, relative to the sink's root, in order.
    Staged {
        /// The staged parts.
        parts: Vec<String>,
    },
}

impl Parts {
    /// How many parts were uploaded.
    pub fn len(&self) -> usize {
        match self {
            Parts::Multipart { parts, .. } | Parts::Staged { parts } => parts.len(),
        }
    }
}

/// The store a sink writes into, and how it uploads.
#[derive(Clone)]
pub(crate) struct Uploader {
    pub store: Arc<dyn ObjectStore>,
    pub multipart: Option<Arc<dyn MultipartStore>>,
    pub root: Path,
    /// The sink's root on the local file system, for a local store.
    pub local_root: Option<std::path::PathBuf>,
}

impl Uploader {
    /// The path of `relative` under the sink's root.
    pub fn path(&self, relative: &str) -> Path {
        let mut path = self.root.clone();
        for part in relative.split('/') {
            path = path.join(part);
        }
        path
    }

    /// Starts the upload of a file; its staging names start with `staging`
    /// (relative, no extension, unique to the writer's epoch).
    pub async fn start(&self, staging: &str) -> Result<Parts> {
        match &self.multipart {
            Some(multipart) => {
                let object = format!("{staging}.upload");
                let path = self.path(&object);
                let upload = multipart
                    .create_multipart(&path)
                    .await
                    .map_err(|e| Error::storage("start the upload of", &path, e))?;
                Ok(Parts::Multipart {
                    upload,
                    parts: Vec::new(),
                    object: Some(object),
                    superseded: Vec::new(),
                })
            }
            None => Ok(Parts::Staged { parts: Vec::new() }),
        }
    }

    /// The multipart API, which a checkpointed upload needs: a store without
    /// one means the URL changed between runs.
    fn multipart_for(&self, path: &Path) -> Result<&Arc<dyn MultipartStore>> {
        self.multipart.as_ref().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "'{path}' was uploaded in parts, but this store has no multipart API: was the \
                 output URL changed between runs? Resume with the URL the job started with"
            ))
        })
    }

    /// Where a multipart upload's parts go: its staging object, or (for
    /// checkpoints written before staging objects) the file itself.
    fn upload_path(&self, file: &str, object: Option<&str>) -> Path {
        self.path(object.unwrap_or(file))
    }

    /// Takes over the multipart upload of a file resumed from a checkpoint
    /// that `uploaded` bytes of parts went into: completes it with the parts
    /// listed (a paused predecessor's later parts are dropped), reads those
    /// bytes back, and starts this run's own upload. Returns the new parts and
    /// the bytes, which go in front of the checkpoint's tail. `None` for
    /// staged parts and for uploads that go straight to the file's name
    /// (checkpoints of earlier versions), which are continued as they are.
    pub async fn take_over(
        &self,
        staging: &str,
        parts: &Parts,
        uploaded: u64,
    ) -> Result<Option<(Parts, Vec<u8>)>> {
        let Parts::Multipart {
            upload,
            parts: ids,
            object: Some(object),
            superseded,
        } = parts
        else {
            return Ok(None);
        };
        let path = self.path(object);
        let multipart = self.multipart_for(&path)?;
        let mut bytes = Vec::new();
        if !ids.is_empty() {
            let listed = part_ids(ids);
            if let Err(e) = multipart.complete_multipart(&path, upload, listed).await {
                // Completed by an earlier take-over of the same checkpoint.
                if self.store.head(&path).await.is_err() {
                    return Err(Error::Corrupt(format!(
                        "resuming '{path}': its upload cannot be completed ({e}) and no earlier \
                         run completed it: was the upload aborted, for example by a bucket \
                         lifecycle rule shorter than the job's downtime?"
                    )));
                }
            }
            bytes = self
                .store
                .get(&path)
                .await
                .map_err(|e| Error::storage("read", &path, e))?
                .bytes()
                .await
                .map_err(|e| Error::storage("read", &path, e))?
                .to_vec();
            // A store that assembles every uploaded part (not only those
            // listed) puts the crashed run's later parts after these.
            if (bytes.len() as u64) < uploaded {
                return Err(Error::Corrupt(format!(
                    "resuming '{path}': it holds {} bytes, the checkpoint counts {uploaded}",
                    bytes.len()
                )));
            }
            bytes.truncate(uploaded as usize);
        }
        let mut fresh = self.start(staging).await?;
        if let Parts::Multipart {
            superseded: mine, ..
        } = &mut fresh
        {
            mine.extend(superseded.iter().cloned());
            if !ids.is_empty() {
                mine.push(object.clone());
            }
        }
        Ok(Some((fresh, bytes)))
    }

    /// Uploads the next part of `file`. `staging` names its staged parts.
    pub async fn put_part(
        &self,
        file: &str,
        staging: &str,
        parts: &mut Parts,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let index = parts.len();
        match parts {
            Parts::Multipart {
                upload,
                parts,
                object,
                ..
            } => {
                let path = self.upload_path(file, object.as_deref());
                let multipart = self.multipart_for(&path)?;
                let id = multipart
                    .put_part(&path, upload, index, PutPayload::from(bytes))
                    .await
                    .map_err(|e| Error::storage("upload a part of", &path, e))?;
                parts.push(id.content_id);
            }
            Parts::Staged { parts } => {
                let name = format!("{staging}.part-{index:05}");
                let path = self.path(&name);
                self.store
                    .put(&path, PutPayload::from(bytes))
                    .await
                    .map_err(|e| Error::storage("stage", &path, e))?;
                parts.push(name);
            }
        }
        Ok(())
    }

    /// Makes `file` visible with the content of its parts. Idempotent: a file
    /// already completed stays as it is.
    /// Whether `file` (relative to the root) is published.
    pub async fn exists(&self, file: &str) -> Result<bool> {
        let path = self.path(file);
        match self.store.head(&path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(Error::Storage {
                action: "look for a published file",
                path: path.to_string(),
                source,
            }),
        }
    }

    pub async fn complete(&self, file: &str, parts: &Parts) -> Result<()> {
        let path = self.path(file);
        match parts {
            Parts::Multipart {
                upload,
                parts,
                object: Some(object),
                superseded,
            } => {
                self.publish_staged_upload(&path, upload, parts, object)
                    .await?;
                // Predecessors' staging objects whose bytes are in the file.
                for old in superseded {
                    self.delete(&self.path(old)).await?;
                }
            }
            Parts::Multipart {
                upload,
                parts,
                object: None,
                ..
            } => {
                let multipart = self.multipart_for(&path)?;
                let ids = part_ids(parts);
                match multipart.complete_multipart(&path, upload, ids).await {
                    Ok(_) => FileCommitted {
                        file: path.as_ref(),
                    }
                    .emit(),
                    // Completed before a crash: the upload is gone, the file is there.
                    Err(e) => self.confirm_exists(&path, e).await?,
                }
            }
            Parts::Staged { parts } => {
                if self.store.head(&path).await.is_ok() {
                    // Concatenated before a crash; only the leftovers may remain.
                    self.delete_concatenation_leftovers(parts)?;
                    return self.delete_all(parts).await;
                }
                if let (Some(root), Some(first)) = (&self.local_root, parts.first()) {
                    let local =
                        |relative: &str| tidewater_core::local_file(root, relative.split('/'));
                    let sources: Vec<_> = parts.iter().map(|part| local(part)).collect();
                    // Named like the file's staged parts, so a writer opening
                    // after a crash mid-concatenation deletes a leftover, and
                    // unique to this process: a paused earlier run that wakes
                    // up may be concatenating the same parts right now.
                    let temporary = local(&format!(
                        "{first}.concat-{}-{}",
                        std::process::id(),
                        CONCATENATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    ));
                    let target = local(file);
                    tokio::task::spawn_blocking(move || {
                        concatenate_files(&sources, &temporary, &target)
                    })
                    .await
                    .map_err(|e| Error::Internal(format!("concatenation task failed: {e}")))??;
                    FileCommitted {
                        file: path.as_ref(),
                    }
                    .emit();
                    self.delete_concatenation_leftovers(parts)?;
                    return self.delete_all(parts).await;
                }
                let writer = self
                    .store
                    .put_multipart(&path)
                    .await
                    .map_err(|e| Error::storage("create", &path, e))?;
                let mut writer = WriteMultipart::new(writer);
                for part in parts {
                    let staged = self.path(part);
                    let bytes = self
                        .store
                        .get(&staged)
                        .await
                        .map_err(|e| lost_part(&staged, &path, e))?
                        .bytes()
                        .await
                        .map_err(|e| Error::storage("read", &staged, e))?;
                    writer.write(&bytes);
                }
                writer
                    .finish()
                    .await
                    .map_err(|e| Error::storage("write", &path, e))?;
                FileCommitted {
                    file: path.as_ref(),
                }
                .emit();
                self.delete_all(parts).await?;
            }
        }
        Ok(())
    }

    /// Completes an upload into its staging object, copies that to the
    /// file's name (server-side) and deletes it. Idempotent, and safe when
    /// two runs commit the same file at once: they copy the same bytes.
    async fn publish_staged_upload(
        &self,
        path: &Path,
        upload: &str,
        parts: &[String],
        object: &str,
    ) -> Result<()> {
        let staged = self.path(object);
        if self.store.head(path).await.is_ok() {
            // Published before a crash; only the staging object may remain.
            return self.delete(&staged).await;
        }
        let multipart = self.multipart_for(path)?;
        let ids = part_ids(parts);
        if let Err(e) = multipart
            .complete_multipart(&staged, &upload.to_string(), ids)
            .await
            && self.store.head(&staged).await.is_err()
        {
            // Another committer may have published it and cleaned up meanwhile.
            return self.confirm_exists(path, e).await;
        }
        match self.store.copy(&staged, path).await {
            Ok(()) => FileCommitted {
                file: path.as_ref(),
            }
            .emit(),
            Err(e) => {
                if self.store.head(path).await.is_err() {
                    return Err(Error::storage("publish", path, e));
                }
            }
        }
        self.delete(&staged).await
    }

    async fn confirm_exists(&self, path: &Path, error: object_store::Error) -> Result<()> {
        match self.store.head(path).await {
            Ok(_) => Ok(()),
            Err(_) => Err(Error::Corrupt(format!(
                "cannot complete the upload of '{path}' ({error}) and the file does not exist: \
                 was the upload aborted, for example by a bucket lifecycle rule shorter than \
                 the job's downtime?"
            ))),
        }
    }

    /// Deletes staged parts (missing ones are fine).
    pub async fn delete_all(&self, parts: &[String]) -> Result<()> {
        for part in parts {
            self.delete(&self.path(part)).await?;
        }
        Ok(())
    }

    /// Deletes one object; a missing object is fine.
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::storage("delete", path, e)),
        }
    }

    /// Deletes the temporary files (`{name}#{n}`) that a killed write left in
    /// the local folder `relative`, for names starting with `prefix`. The
    /// local store does not list them; other stores have none.
    pub fn delete_local_temporaries(&self, relative: &str, prefix: &str) -> Result<()> {
        self.delete_local_files(relative, prefix, |name| name.contains('#'))
    }

    /// Deletes the files in local folder `relative` whose names start with
    /// `prefix` and pass `also`; nothing on other stores.
    fn delete_local_files(
        &self,
        relative: &str,
        prefix: &str,
        also: impl Fn(&str) -> bool,
    ) -> Result<()> {
        let Some(root) = &self.local_root else {
            return Ok(());
        };
        let dir = tidewater_core::local_file(root, relative.split('/'));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(()); // no such folder: nothing was ever staged
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(prefix) && also(&name) {
                LeftoverDeleted {
                    file: &entry.path().display().to_string(),
                    what: "a killed write's temporary file",
                }
                .emit();
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::External {
                            message: format!("deleting '{}': {e}", entry.path().display()),
                            retryable: true,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Deletes what concatenations of these parts killed mid-way left
    /// (`{first part}.concat-{pid}-{n}`), once the file is published: a
    /// commit repeated after the final checkpoint opens no writer whose
    /// start-up would otherwise delete them.
    fn delete_concatenation_leftovers(&self, parts: &[String]) -> Result<()> {
        let Some(first) = parts.first() else {
            return Ok(());
        };
        let (folder, name) = first.rsplit_once('/').unwrap_or(("", first.as_str()));
        self.delete_local_files(folder, &format!("{name}.concat-"), |_| true)
    }

    /// Every object under `relative`.
    pub async fn list(&self, relative: &str) -> Result<Vec<Path>> {
        let dir = self.path(relative);
        let objects: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list", &dir, e))?;
        Ok(objects.into_iter().map(|o| o.location).collect())
    }
}

/// Numbers this process's concatenation temporaries.
static CONCATENATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Writes `sources` one after another into `temporary`, makes it durable
/// and publishes it as `target` (see [`publish_once`]). The copy stays in the
/// kernel (copy_file_range on Linux): committing a 128 MiB file costs no
/// process memory.
fn concatenate_files(
    sources: &[std::path::PathBuf],
    temporary: &std::path::Path,
    target: &std::path::Path,
) -> Result<()> {
    let failed = |what: &str, path: &std::path::Path, e: std::io::Error| Error::External {
        message: format!(
            "committing '{}': {what} '{}': {e}; check the output folder's free space and \
             permissions",
            target.display(),
            path.display()
        ),
        retryable: true,
    };
    let mut out = std::fs::File::create(temporary).map_err(|e| failed("creating", temporary, e))?;
    for source in sources {
        let mut part = std::fs::File::open(source)
            .map_err(|e| lost_part(source.display(), target.display(), e))?;
        std::io::copy(&mut part, &mut out).map_err(|e| failed("copying", source, e))?;
    }
    out.sync_all()
        .map_err(|e| failed("syncing", temporary, e))?;
    drop(out);
    publish_once(temporary, target).map_err(|e| failed("publishing", temporary, e))?;
    if let Some(dir) = target.parent() {
        std::fs::File::open(dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| failed("syncing the folder of", target, e))?;
    }
    Ok(())
}

/// Makes the whole file `temporary` visible as `target` in one atomic,
/// exclusive step (a hard link, which fails when the name exists), then
/// removes `temporary`. When `target` exists, another run published it first
/// from the same staged parts (a commit repeated by a successor while a
/// paused earlier run woke up): it is whole, since every publication is, and
/// it is kept rather than overwritten.
fn publish_once(temporary: &std::path::Path, target: &std::path::Path) -> std::io::Result<()> {
    match std::fs::hard_link(temporary, target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let ours = std::fs::metadata(temporary)?.len();
            let theirs = std::fs::metadata(target)?.len();
            FileAlreadyPublished {
                file: &target.display().to_string(),
                bytes: theirs,
                expected: ours,
            }
            .emit();
        }
        // A file system without hard links: create-only by check, then rename.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::Unsupported | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            if !target.exists() {
                std::fs::rename(temporary, target)?;
            }
        }
        Err(e) => return Err(e),
    }
    match std::fs::remove_file(temporary) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Checkpointed part ids as the multipart API takes them, in order.
fn part_ids(ids: &[String]) -> Vec<PartId> {
    ids.iter()
        .map(|id| PartId {
            content_id: id.clone(),
        })
        .collect()
}

fn lost_part(staged: impl Display, file: impl Display, error: impl Display) -> Error {
    Error::Corrupt(format!(
        "'{file}' cannot be committed: its staged part '{staged}' cannot be read ({error}); \
         was the _staging folder cleaned by hand?"
    ))
}

impl Parts {
    /// The staged objects these parts occupy or still need: staged parts,
    /// or a multipart upload's superseded staging objects.
    pub fn staged(&self) -> Vec<String> {
        match self {
            Parts::Multipart { superseded, .. } => superseded.clone(),
            Parts::Staged { parts } => parts.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tidewater_core::open_location;

    use super::*;

    fn local_uploader(dir: &std::path::Path) -> Uploader {
        let location = open_location(dir.to_str().unwrap()).unwrap();
        Uploader {
            store: location.store,
            multipart: location.multipart,
            root: location.prefix,
            local_root: location.local_folder,
        }
    }

    #[tokio::test]
    async fn local_parts_concatenate_into_the_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let uploader = local_uploader(dir.path());
        let mut parts = uploader.start("f.parquet").await.unwrap();
        let chunks: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 1000 + i as usize]).collect();
        for chunk in &chunks {
            uploader
                .put_part(
                    "f.parquet",
                    "_staging/u/0000-000000",
                    &mut parts,
                    chunk.clone(),
                )
                .await
                .unwrap();
        }
        // An earlier process was killed while concatenating these parts.
        let leftover = dir
            .path()
            .join("_staging/u/0000-000000.part-00000.concat-999999-0");
        std::fs::write(&leftover, b"half a file").unwrap();
        uploader.complete("f.parquet", &parts).await.unwrap();
        assert!(!leftover.exists(), "a killed concatenation's file was left");
        // A commit repeated after a crash leaves the file as it is, and
        // removes what a concatenation killed after the publication left.
        std::fs::write(&leftover, b"half a file").unwrap();
        uploader.complete("f.parquet", &parts).await.unwrap();
        assert!(!leftover.exists(), "a killed concatenation's file was left");

        let written = std::fs::read(dir.path().join("f.parquet")).unwrap();
        assert_eq!(written, chunks.concat());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("_staging/u"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "staged parts left behind: {left:?}");
    }

    #[tokio::test]
    async fn a_missing_staged_part_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let uploader = local_uploader(dir.path());
        let mut parts = uploader.start("f.parquet").await.unwrap();
        for _ in 0..2 {
            uploader
                .put_part(
                    "f.parquet",
                    "_staging/u/0000-000000",
                    &mut parts,
                    vec![7; 10],
                )
                .await
                .unwrap();
        }
        std::fs::remove_file(dir.path().join("_staging/u/0000-000000.part-00001")).unwrap();

        let err = uploader.complete("f.parquet", &parts).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains("0000-000000.part-00001"), "{message}");
        assert!(
            message.contains("_staging folder cleaned by hand"),
            "{message}"
        );
        assert!(!dir.path().join("f.parquet").exists());
    }
}
