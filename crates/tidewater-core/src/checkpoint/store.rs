//! The state store: checkpoints, blobs and epochs of one job on object storage.
//!
//! ```text
//! {prefix}/{job}/chk-00000000000000000042/_MANIFEST.json
//! {prefix}/{job}/chk-00000000000000000042/{uid}/{subtask}.arrow
//! {prefix}/{job}/_epochs/00000000000000000007
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::checkpoint::fence;
use crate::checkpoint::incremental::referenced_folders;
use crate::checkpoint::local_folders;
use crate::checkpoint::local_write;
use crate::checkpoint::manifest::{BlobRecord, MANIFEST_FORMAT, Manifest};
use crate::checkpoint::restore;
use crate::checkpoint::upload::{self, PartPool};
use crate::checkpoint::{blob, off_task};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, Epoch};
use crate::store_url::StoreLocation;

const MANIFEST: &str = "_MANIFEST.json";
const EPOCHS: &str = "_epochs";

/// Checkpoint storage for one job.
#[derive(Debug, Clone)]
pub struct StateStore {
    store: Arc<dyn ObjectStore>,
    root: Path,
    job: String,
    /// Part buffers back from their upload, for the next large blobs.
    parts: PartPool,
    /// The store's folder, when it is a local one: blobs are written there
    /// directly, and their folders synced once per checkpoint (see
    /// [`local_write`]).
    local_folder: Option<std::path::PathBuf>,
}

impl StateStore {
    /// The state of job `job` under `location`.
    pub fn new(location: &StoreLocation, job: &str) -> Self {
        let root = location.prefix.clone().join(job);
        StateStore {
            store: location.store.clone(),
            root,
            job: job.to_string(),
            parts: PartPool::default(),
            local_folder: location.local_folder.clone(),
        }
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    fn checkpoint_dir(&self, id: CheckpointId) -> Path {
        self.root.clone().join(format!("chk-{:020}", id.0))
    }

    fn manifest_path(&self, id: CheckpointId) -> Path {
        self.checkpoint_dir(id).join(MANIFEST)
    }

    /// Encodes and writes the state of one subtask of one operator. The
    /// encoding is CPU work and runs off the async workers. A large state
    /// is written as it is encoded, so no encoded copy of it is ever held:
    /// directly to the device for a local folder, in parts of a multipart
    /// upload for an object store. A small one is encoded and put whole.
    /// On a local folder, the blob's name is durable once the checkpoint's
    /// manifest is written ([`write_manifest`](Self::write_manifest)).
    pub async fn put_state(
        &self,
        id: CheckpointId,
        uid: &str,
        subtask: usize,
        batch: RecordBatch,
    ) -> Result<BlobRecord> {
        let size = batch.get_array_memory_size();
        let path = self.blob_object(id, uid, subtask);
        let written = match &self.local_folder {
            Some(folder) if size >= local_write::DIRECT_MIN_BYTES => {
                let file = crate::local_file(folder, path.parts());
                off_task(move || local_write::write_state(&file, &path, &batch)).await?
            }
            Some(folder) => {
                let file = crate::local_file(folder, path.parts());
                off_task(move || {
                    let bytes = blob::encode(&batch)?;
                    local_write::write_small_blob(&file, &path, &bytes)
                })
                .await?
            }
            _ if size >= upload::PART_BYTES => {
                upload::put_in_parts(self.store.as_ref(), &path, batch, &self.parts).await?
            }
            _ => {
                let bytes = off_task(move || blob::encode(&batch)).await?;
                return self.put_blob(id, uid, subtask, bytes).await;
            }
        };
        Ok(BlobRecord {
            bytes: written.bytes,
            crc32: written.crc32,
            ..self.blob_record(uid, subtask)
        })
    }

    /// Puts an encoded state blob of one subtask of one operator.
    pub async fn put_blob(
        &self,
        id: CheckpointId,
        uid: &str,
        subtask: usize,
        bytes: Bytes,
    ) -> Result<BlobRecord> {
        let path = self.blob_object(id, uid, subtask);
        if let Some(folder) = &self.local_folder {
            let file = crate::local_file(folder, path.parts());
            let written =
                off_task(move || local_write::write_small_blob(&file, &path, &bytes)).await?;
            return Ok(BlobRecord {
                bytes: written.bytes,
                crc32: written.crc32,
                ..self.blob_record(uid, subtask)
            });
        }
        let record = BlobRecord {
            bytes: bytes.len() as u64,
            crc32: blob::checksum(&bytes),
            ..self.blob_record(uid, subtask)
        };
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| Error::storage("write state blob", &path, e))?;
        Ok(record)
    }

    fn blob_object(&self, id: CheckpointId, uid: &str, subtask: usize) -> Path {
        self.checkpoint_dir(id)
            .join(uid)
            .join(format!("{subtask}.arrow"))
    }

    /// The record of a blob written in its own checkpoint's folder, its
    /// length and checksum still to fill in.
    fn blob_record(&self, uid: &str, subtask: usize) -> BlobRecord {
        BlobRecord {
            uid: uid.to_string(),
            subtask,
            path: format!("{uid}/{subtask}.arrow"),
            bytes: 0,
            crc32: 0,
            written_in: None,
            delta: false,
        }
    }

    /// Reads a blob and verifies it against its record.
    pub async fn read_blob(&self, id: CheckpointId, record: &BlobRecord) -> Result<RecordBatch> {
        let slices = self.read_blob_slices(id, record).await?;
        blob::join(&slices, &record.describe(id))
    }

    /// Reads a blob and verifies it against its record, as the slices it
    /// was written in (see [`blob::decode_slices`]).
    pub async fn read_blob_slices(
        &self,
        id: CheckpointId,
        record: &BlobRecord,
    ) -> Result<Vec<RecordBatch>> {
        let path = self.blob_path(id, record)?;
        let bytes = self.get(&path, "read state blob").await?;
        let what = record.describe(id);
        if bytes.len() as u64 != record.bytes {
            return Err(Error::Corrupt(format!(
                "{what}: {} bytes where the manifest says {}",
                bytes.len(),
                record.bytes
            )));
        }
        blob::decode_slices(bytes, record.crc32, &what)
    }

    /// The object path of a blob record of checkpoint `id`'s manifest (in
    /// an earlier checkpoint's folder when the record says so).
    pub fn blob_path(&self, id: CheckpointId, record: &BlobRecord) -> Result<Path> {
        let mut path = self.checkpoint_dir(record.written_in.unwrap_or(id));
        for part in record.path.split('/') {
            let part = object_store::path::PathPart::parse(part).map_err(|e| {
                Error::Corrupt(format!(
                    "checkpoint {id}: bad blob path '{}': {e}",
                    record.path
                ))
            })?;
            path = path.join(part);
        }
        Ok(path)
    }

    /// Writes a manifest with create-only semantics: the checkpoint exists
    /// from this moment on, and a second writer of the same id is refused.
    /// On a local folder, the folders its new blobs went into are synced
    /// first, so that every blob it lists is durable by then.
    pub async fn write_manifest(&self, manifest: &Manifest) -> Result<()> {
        let path = self.manifest_path(manifest.checkpoint);
        if let Some(folder) = &self.local_folder {
            let own = crate::local_file(folder, self.checkpoint_dir(manifest.checkpoint).parts());
            let mut folders = folders_to_sync(&own, manifest);
            folders.push(crate::local_file(folder, self.root.parts()));
            off_task(move || {
                local_write::sync_folders(&folders)
                    .map_err(|e| folder_error("sync the folders of", &own, e))
            })
            .await?;
        }
        let json = serde_json::to_vec_pretty(manifest)
            .map_err(|e| Error::Internal(format!("manifest does not serialise: {e}")))?;
        match self.put_if_absent(&path, PutPayload::from(json)).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(Error::Fenced {
                job: self.job.clone(),
                mine: manifest.epoch,
                newer: self.latest_epoch().await?.unwrap_or(manifest.epoch),
            }),
            Err(e) => Err(Error::storage("write manifest", &path, e)),
        }
    }

    /// Reads and parses the manifest of checkpoint `id`.
    pub async fn read_manifest(&self, id: CheckpointId) -> Result<Manifest> {
        let path = self.manifest_path(id);
        let bytes = self.get(&path, "read manifest").await?;
        let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Corrupt(format!(
                "checkpoint {id}: manifest '{path}' is not valid: {e}"
            ))
        })?;
        if manifest.format > MANIFEST_FORMAT {
            return Err(Error::Corrupt(format!(
                "checkpoint {id}: manifest '{path}' has format {}, newer than this build reads \
                 ({MANIFEST_FORMAT}); run a tidewater at least as new as the one that wrote it",
                manifest.format
            )));
        }
        Ok(manifest)
    }

    /// What retention would delete now, keeping the newest `retain`
    /// complete checkpoints and every folder their manifests list blobs in
    /// (see [`restore::retention`]). Fails rather than guess when a kept
    /// manifest cannot be read for a reason other than being corrupt (a
    /// corrupt one is never restored, so it needs nothing).
    ///
    /// `known` holds the folders each checkpoint's manifest lists, as far
    /// as the caller knows them (a coordinator knows its own manifests'):
    /// only the kept manifests missing from it are read, and it is left
    /// holding the kept ones, so that a running job reads none of its own.
    pub async fn retention(
        &self,
        retain: usize,
        known: &mut BTreeMap<CheckpointId, BTreeSet<CheckpointId>>,
    ) -> Result<restore::Retention> {
        let (complete, folders) = self.list_checkpoints().await?;
        if complete.len() <= retain {
            return Ok(restore::retention(&complete, &folders, retain, known));
        }
        let kept = restore::retained(&complete, retain);
        known.retain(|id, _| kept.contains(id));
        for id in kept {
            if known.contains_key(&id) {
                continue;
            }
            match self.read_manifest(id).await {
                Ok(manifest) => {
                    known.insert(id, referenced_folders(&manifest.blobs));
                }
                Err(Error::Corrupt(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(restore::retention(&complete, &folders, retain, known))
    }

    /// Applies retention: the retired manifests first, then the folders
    /// (see [`restore::Retention`] for why in that order).
    pub async fn apply_retention(&self, retention: &restore::Retention) -> Result<()> {
        for id in &retention.retired {
            self.delete_manifest(*id).await?;
        }
        for id in &retention.victims {
            self.delete_checkpoint(*id).await?;
        }
        Ok(())
    }

    /// Ids of every checkpoint that has a manifest, and of every checkpoint
    /// folder (with or without one), both ascending.
    pub async fn list_checkpoints(&self) -> Result<(Vec<CheckpointId>, Vec<CheckpointId>)> {
        if let Some(folder) = &self.local_folder {
            let root = crate::local_file(folder, self.root.parts());
            return off_task(move || {
                local_folders::list(&root, MANIFEST, parse_checkpoint_folder)
                    .map_err(|e| folder_error("list the checkpoints in", &root, e))
            })
            .await;
        }
        self.list_checkpoints_in_store().await
    }

    /// [`list_checkpoints`](Self::list_checkpoints) through the object
    /// store's listing, which reads every file's metadata.
    async fn list_checkpoints_in_store(&self) -> Result<(Vec<CheckpointId>, Vec<CheckpointId>)> {
        let objects: Vec<_> = self
            .store
            .list(Some(&self.root))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list checkpoints", &self.root, e))?;
        let mut complete = BTreeSet::new();
        let mut folders = BTreeSet::new();
        let depth = self.root.parts().count();
        for object in objects {
            let parts: Vec<_> = object.location.parts().skip(depth).collect();
            let Some(id) = parts
                .first()
                .and_then(|p| parse_checkpoint_folder(p.as_ref()))
            else {
                continue;
            };
            folders.insert(id);
            if parts.len() == 2 && parts[1].as_ref() == MANIFEST {
                complete.insert(id);
            }
        }
        Ok((
            complete.into_iter().collect(),
            folders.into_iter().collect(),
        ))
    }

    /// Deletes everything of checkpoint `id`.
    pub async fn delete_checkpoint(&self, id: CheckpointId) -> Result<()> {
        let dir = self.checkpoint_dir(id);
        // The manifest goes first: a half-deleted checkpoint must not look complete.
        self.delete_manifest(id).await?;
        let objects: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list checkpoint", &dir, e))?;
        for object in objects {
            match self.store.delete(&object.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(Error::storage(
                        "delete checkpoint object",
                        object.location,
                        e,
                    ));
                }
            }
        }
        // A local folder keeps the checkpoint's folders, empty.
        if let Some(folder) = &self.local_folder {
            let local = crate::local_file(folder, dir.parts());
            off_task(move || {
                local_folders::remove_empty_tree(&local)
                    .map_err(|e| folder_error("remove the folders of", &local, e))
            })
            .await?;
        }
        Ok(())
    }

    /// Removes the empty checkpoint folders a local state folder holds: a
    /// crash between deleting a checkpoint's files and its folders leaves
    /// them, and builds before this one left them all. Returns how many
    /// went; an object store has none.
    pub async fn sweep_empty_folders(&self) -> Result<usize> {
        let Some(folder) = &self.local_folder else {
            return Ok(0);
        };
        let root = crate::local_file(folder, self.root.parts());
        off_task(move || {
            local_folders::sweep(&root, |name| parse_checkpoint_folder(name).is_some())
                .map_err(|e| folder_error("sweep the empty checkpoint folders of", &root, e))
        })
        .await
    }

    /// Deletes checkpoint `id`'s manifest (if there is one) and nothing
    /// else: it is no longer complete, but its blobs stay for the chains
    /// of later checkpoints that list them.
    pub async fn delete_manifest(&self, id: CheckpointId) -> Result<()> {
        match self.store.delete(&self.manifest_path(id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::storage("delete manifest", self.manifest_path(id), e)),
        }
    }

    /// Every epoch taken so far.
    pub async fn epochs(&self) -> Result<Vec<Epoch>> {
        let dir = self.root.clone().join(EPOCHS);
        // Checked before every manifest: on a local folder, the names alone.
        if let Some(folder) = &self.local_folder {
            let local = crate::local_file(folder, dir.parts());
            return off_task(move || {
                let names = local_folders::file_names(&local)
                    .map_err(|e| folder_error("list the epochs in", &local, e))?;
                Ok(names
                    .iter()
                    .filter_map(|n| n.parse().ok().map(Epoch))
                    .collect())
            })
            .await;
        }
        let objects: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| Error::storage("list epochs", &dir, e))?;
        Ok(objects
            .iter()
            .filter_map(|o| o.location.filename()?.parse().ok().map(Epoch))
            .collect())
    }

    async fn latest_epoch(&self) -> Result<Option<Epoch>> {
        Ok(self.epochs().await?.into_iter().max())
    }

    /// Takes the job: claims the epoch after the newest one, create-only, so
    /// two workers starting at once never share an epoch.
    pub async fn claim_epoch(&self) -> Result<Epoch> {
        loop {
            let next = fence::next_epoch(&self.epochs().await?);
            let path = self
                .root
                .clone()
                .join(EPOCHS)
                .join(format!("{:020}", next.0));
            match self.put_if_absent(&path, PutPayload::default()).await {
                Ok(()) => return Ok(next),
                Err(object_store::Error::AlreadyExists { .. }) => continue,
                Err(e) => return Err(Error::storage("claim epoch", &path, e)),
            }
        }
    }

    /// Takes the job at `epoch`, given by a lease held elsewhere (a job
    /// store's): claims it create-only, and refuses with [`Error::Fenced`]
    /// when a newer epoch exists. An epoch already claimed is taken again:
    /// the lease makes it this holder's (a restart within the run).
    pub async fn claim_exact_epoch(&self, epoch: Epoch) -> Result<Epoch> {
        let path = self
            .root
            .clone()
            .join(EPOCHS)
            .join(format!("{:020}", epoch.0));
        match self.put_if_absent(&path, PutPayload::default()).await {
            Ok(()) | Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(Error::storage("claim epoch", &path, e)),
        }
        self.check_epoch(epoch).await?;
        Ok(epoch)
    }

    /// The newest epoch taken so far, if any.
    pub async fn newest_epoch(&self) -> Result<Option<Epoch>> {
        self.latest_epoch().await
    }

    /// Writes `path` only if it does not exist: the store's conditional put
    /// (`If-None-Match: *` on S3). A store without one (`NotImplemented`,
    /// e.g. S3 with `AWS_CONDITIONAL_PUT=disabled`) gets a check, then a
    /// put: safe while one worker runs the job at a time, which the epoch
    /// check before every manifest enforces except within that short window.
    async fn put_if_absent(&self, path: &Path, payload: PutPayload) -> object_store::Result<()> {
        let options = PutOptions::from(PutMode::Create);
        match self.store.put_opts(path, payload.clone(), options).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotImplemented { .. }) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    crate::events::InternalEvent::emit(
                        crate::events::StoreWithoutConditionalWrites,
                    );
                });
                match self.store.head(path).await {
                    Ok(_) => Err(object_store::Error::AlreadyExists {
                        path: path.to_string(),
                        source: "exists (checked without a conditional write)".into(),
                    }),
                    Err(object_store::Error::NotFound { .. }) => {
                        self.store.put(path, payload).await.map(|_| ())
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Refuses with [`Error::Fenced`] when a newer epoch than `mine` exists.
    pub async fn check_epoch(&self, mine: Epoch) -> Result<()> {
        fence::check(&self.job, mine, &self.epochs().await?)
    }

    async fn get(&self, path: &Path, action: &'static str) -> Result<Bytes> {
        let result = self
            .store
            .get(path)
            .await
            .map_err(|e| Error::storage(action, path, e))?;
        result
            .bytes()
            .await
            .map_err(|e| Error::storage(action, path, e))
    }
}

fn folder_error(action: &str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::External {
        message: format!(
            "storage: could not {action} '{}': {e}; check the state folder's permissions",
            path.display()
        ),
        retryable: true,
    }
}

/// The folders under `own`, checkpoint `manifest`'s local folder, to sync
/// before the manifest is written: those its new blobs changed (see
/// [`local_folders::changed_by`]). The job's folder, which holds `own`, is
/// the caller's to add.
fn folders_to_sync(own: &std::path::Path, manifest: &Manifest) -> Vec<std::path::PathBuf> {
    let id = manifest.checkpoint;
    let new_blobs = manifest
        .blobs
        .iter()
        .filter(|b| b.written_in.is_none_or(|w| w == id))
        .map(|b| b.path.as_str());
    local_folders::changed_by(new_blobs)
        .iter()
        .map(|relative| {
            relative
                .split('/')
                .filter(|part| !part.is_empty())
                .fold(own.to_path_buf(), |dir, part| dir.join(part))
        })
        .collect()
}

fn parse_checkpoint_folder(name: &str) -> Option<CheckpointId> {
    name.strip_prefix("chk-")?.parse().ok().map(CheckpointId)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::checkpoint::manifest::{CheckpointKind, MANIFEST_FORMAT};

    fn store() -> StateStore {
        let location = StoreLocation {
            store: Arc::new(InMemory::new()),
            prefix: Path::from("state"),
            multipart: None,
            local_folder: None,
            display: "memory://state".into(),
        };
        StateStore::new(&location, "job")
    }

    fn manifest(id: u64, epoch: u64) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            job: "job".into(),
            checkpoint: CheckpointId(id),
            kind: CheckpointKind::Periodic,
            epoch: Epoch(epoch),
            created_at_ms: 0,
            fingerprint: String::new(),
            partitioner: None,
            key_groups: None,
            operators: vec![],
            blobs: vec![],
            commits: vec![],
            rows_read: id * 10,
        }
    }

    #[tokio::test]
    async fn a_manifest_is_written_once_and_a_second_writer_is_refused() {
        let store = store();
        store.claim_epoch().await.unwrap();
        store.write_manifest(&manifest(7, 1)).await.unwrap();

        let mut other = manifest(7, 1);
        other.rows_read = 999;
        let err = store.write_manifest(&other).await.unwrap_err();
        assert!(matches!(err, Error::Fenced { .. }), "{err}");
        // The first manifest is untouched.
        assert_eq!(
            store
                .read_manifest(CheckpointId(7))
                .await
                .unwrap()
                .rows_read,
            70
        );
    }

    #[tokio::test]
    async fn only_folders_with_a_manifest_count_as_checkpoints() {
        let store = store();
        store.write_manifest(&manifest(1, 1)).await.unwrap();
        store
            .put_blob(CheckpointId(2), "agg", 0, Bytes::from_static(b"x"))
            .await
            .unwrap();
        let (complete, folders) = store.list_checkpoints().await.unwrap();
        assert_eq!(complete, vec![CheckpointId(1)]);
        assert_eq!(folders, vec![CheckpointId(1), CheckpointId(2)]);

        store.delete_checkpoint(CheckpointId(1)).await.unwrap();
        let (complete, _) = store.list_checkpoints().await.unwrap();
        assert!(complete.is_empty());
    }

    #[tokio::test]
    async fn a_deleted_checkpoint_leaves_no_folder_in_a_local_state_folder() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(
            &crate::open_location(dir.path().to_str().unwrap()).unwrap(),
            "job",
        );
        for id in [1, 2] {
            store.write_manifest(&manifest(id, 1)).await.unwrap();
            for uid in ["aggregate", "source"] {
                store
                    .put_blob(CheckpointId(id), uid, 0, Bytes::from_static(b"x"))
                    .await
                    .unwrap();
            }
        }
        let folder = |id: u64| dir.path().join("job").join(format!("chk-{id:020}"));
        store.delete_checkpoint(CheckpointId(1)).await.unwrap();
        assert!(!folder(1).exists(), "checkpoint 1's folders are gone");
        assert!(folder(2).join("aggregate/0.arrow").exists());

        // Folders a crash left empty go when a run sweeps them.
        std::fs::create_dir_all(folder(3).join("aggregate")).unwrap();
        assert_eq!(store.sweep_empty_folders().await.unwrap(), 1);
        assert!(!folder(3).exists());
        assert!(folder(2).exists());
        let (complete, _) = store.list_checkpoints().await.unwrap();
        assert_eq!(complete, vec![CheckpointId(2)]);
    }

    /// A store on the local folder `dir`, and the same store reached only
    /// through its object store, to compare what each finds.
    fn local_and_through_its_object_store(dir: &std::path::Path) -> (StateStore, StateStore) {
        let location = crate::open_location(dir.to_str().unwrap()).unwrap();
        let local = StateStore::new(&location, "job");
        let through_store = StateStore {
            local_folder: None,
            ..local.clone()
        };
        (local, through_store)
    }

    #[tokio::test]
    async fn a_local_folder_lists_the_checkpoints_its_object_store_would() {
        let dir = tempfile::tempdir().unwrap();
        let (local, through_store) = local_and_through_its_object_store(dir.path());
        let root = dir.path().join("job");
        let folder = |id: u64| root.join(format!("chk-{id:020}"));
        let touch = |path: std::path::PathBuf| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"x").unwrap();
        };
        touch(folder(1).join("_MANIFEST.json"));
        touch(folder(1).join("aggregate/0.arrow"));
        touch(folder(2).join("aggregate/0.arrow"));
        std::fs::create_dir_all(folder(3).join("aggregate")).unwrap();
        touch(folder(4).join("aggregate/0.arrow#3"));
        touch(folder(5).join("aggregate/0.arrow#writing"));
        touch(folder(6).join("aggregate/_MANIFEST.json"));
        touch(folder(7).join("_MANIFEST.json#12"));
        touch(folder(7).join("a/b/c/0.arrow"));
        touch(folder(8));
        touch(root.join("_epochs/00000000000000000001"));
        touch(root.join("chk-x/_MANIFEST.json"));
        touch(root.join("other/_MANIFEST.json"));

        let expected = (
            vec![CheckpointId(1)],
            [1, 2, 5, 6, 7, 8].map(CheckpointId).to_vec(),
        );
        assert_eq!(through_store.list_checkpoints().await.unwrap(), expected);
        assert_eq!(local.list_checkpoints().await.unwrap(), expected);

        std::fs::remove_dir_all(&root).unwrap();
        let nothing = (vec![], vec![]);
        assert_eq!(local.list_checkpoints().await.unwrap(), nothing);
    }

    #[tokio::test]
    async fn a_local_folder_lists_the_epochs_its_object_store_would() {
        let dir = tempfile::tempdir().unwrap();
        let (local, through_store) = local_and_through_its_object_store(dir.path());
        assert_eq!(local.epochs().await.unwrap(), vec![]);
        for _ in 0..3 {
            local.claim_epoch().await.unwrap();
        }
        let epochs = dir.path().join("job/_epochs");
        std::fs::write(epochs.join("00000000000000000009#4"), b"").unwrap();
        std::fs::write(epochs.join("not-an-epoch"), b"").unwrap();
        let mut listed = local.epochs().await.unwrap();
        listed.sort();
        assert_eq!(listed, [1, 2, 3].map(Epoch).to_vec());
        let mut expected = through_store.epochs().await.unwrap();
        expected.sort();
        assert_eq!(listed, expected);
    }

    #[tokio::test]
    async fn a_local_checkpoint_reads_back_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(
            &crate::open_location(dir.path().to_str().unwrap()).unwrap(),
            "job",
        );
        store.claim_epoch().await.unwrap();
        let batch = RecordBatch::try_from_iter([(
            "k",
            Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])) as _,
        )])
        .unwrap();
        let id = CheckpointId(4);
        let mut manifest = manifest(4, 1);
        manifest.blobs = vec![
            store
                .put_state(id, "aggregate", 0, batch.clone())
                .await
                .unwrap(),
            store
                .put_blob(id, "source", 1, Bytes::from_static(b"cursor"))
                .await
                .unwrap(),
        ];
        store.write_manifest(&manifest).await.unwrap();

        let read = store.read_manifest(id).await.unwrap();
        assert_eq!(read.blobs, manifest.blobs);
        assert_eq!(store.read_blob(id, &read.blobs[0]).await.unwrap(), batch);
        let path = store.blob_path(id, &read.blobs[1]).unwrap();
        assert_eq!(store.get(&path, "read").await.unwrap().as_ref(), b"cursor");
        let folder = dir.path().join("job/chk-00000000000000000004");
        let mut names: Vec<String> = ["aggregate", "source"]
            .iter()
            .flat_map(|uid| std::fs::read_dir(folder.join(uid)).unwrap())
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, vec!["0.arrow", "1.arrow"]);
        assert_eq!(
            store.list_checkpoints().await.unwrap(),
            (vec![id], vec![id])
        );
    }

    #[tokio::test]
    async fn epochs_increase_and_an_older_epoch_is_fenced() {
        let store = store();
        let first = store.claim_epoch().await.unwrap();
        let second = store.claim_epoch().await.unwrap();
        assert_eq!((first, second), (Epoch(1), Epoch(2)));
        store.check_epoch(second).await.unwrap();
        let err = store.check_epoch(first).await.unwrap_err();
        assert!(err.to_string().contains("epoch 2 took over"), "{err}");
    }
}
