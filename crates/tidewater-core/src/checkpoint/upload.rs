//! Large state blobs to an object store, uploaded in parts as they are
//! encoded.
//!
//! Encoding a 320 MB state into one buffer and putting it whole holds a
//! second copy of the state until the upload ends (and keeping such buffers
//! for reuse held several). Here the encoder fills parts of [`PART_BYTES`]
//! on a blocking thread and hands each to a multipart upload, at most
//! [`PARTS_IN_FLIGHT`] uploading and one waiting: a blob of any size holds a
//! few parts, and a slow store slows the encoder instead of growing memory.
//! The object appears only when the upload completes, all of it or nothing,
//! like a whole put; an upload cut short by a crash leaves no object.
//!
//! Part buffers come back to a small pool once their upload let go of them:
//! fresh memory costs the kernel as much to zero as the encoding costs.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tokio::sync::mpsc;

use crate::checkpoint::local_write::Written;
use crate::checkpoint::{blob, off_task};
use crate::error::{Error, Result};

/// The size of each uploaded part, and the least state uploaded in parts
/// (S3 takes parts of 5 MiB and more, the last one excepted).
pub(crate) const PART_BYTES: usize = 8 << 20;

/// Parts uploading at once, per blob.
const PARTS_IN_FLIGHT: usize = 2;

/// Part buffers kept for reuse, across all blobs of a store.
const KEPT_PARTS: usize = 8;

/// Part buffers back from their upload, shared by a store's blobs.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartPool {
    kept: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl PartPool {
    /// An empty buffer with room for a part: a kept one if there is one.
    fn take(&self) -> Vec<u8> {
        self.lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(PART_BYTES))
    }

    fn give_back(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        let mut kept = self.lock();
        if kept.len() < KEPT_PARTS && buffer.capacity() >= PART_BYTES {
            kept.push(buffer);
        }
    }

    /// How many buffers are kept (for tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        // A panic while holding the lock leaves a valid list of buffers.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A part's bytes, which go back to the pool when the last reader drops them.
struct PooledPart {
    data: Vec<u8>,
    pool: PartPool,
}

impl AsRef<[u8]> for PooledPart {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for PooledPart {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.data));
    }
}

/// The encoder's end: bytes in through [`Write`], full parts out to the
/// uploader, checksummed on the way.
struct PartWriter {
    part: Vec<u8>,
    parts: mpsc::Sender<Bytes>,
    pool: PartPool,
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl PartWriter {
    fn send(&mut self) -> io::Result<()> {
        let data = std::mem::replace(&mut self.part, self.pool.take());
        let part = Bytes::from_owner(PooledPart {
            data,
            pool: self.pool.clone(),
        });
        self.parts
            .blocking_send(part)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload stopped"))
    }

    /// Sends what is left and says what was written.
    fn finish(mut self) -> io::Result<Written> {
        if !self.part.is_empty() {
            self.send()?;
        }
        Ok(Written {
            bytes: self.bytes,
            crc32: self.hasher.finalize(),
        })
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = PART_BYTES - self.part.len();
        let taken = &buf[..buf.len().min(room)];
        self.part.extend_from_slice(taken);
        self.hasher.update(taken);
        self.bytes += taken.len() as u64;
        if self.part.len() == PART_BYTES {
            self.send()?;
        }
        Ok(taken.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Encodes `batch` (as [`blob::encode_to`] does) into the object at `path`,
/// part by part. Any failure aborts the upload, so no object appears.
pub(crate) async fn put_in_parts(
    store: &dyn ObjectStore,
    path: &Path,
    batch: RecordBatch,
    pool: &PartPool,
) -> Result<Written> {
    let upload = store
        .put_multipart(path)
        .await
        .map_err(|e| Error::storage("write state blob", path, e))?;
    let mut upload = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let (sender, mut parts) = mpsc::channel(1);
    let writer = PartWriter {
        part: pool.take(),
        parts: sender,
        pool: pool.clone(),
        hasher: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let what = path.to_string();
    let encoder = off_task(move || {
        let writer = blob::encode_to(&batch, writer)?;
        writer.finish().map_err(|e| Error::External {
            message: format!("storage: write state blob '{what}' failed: {e}"),
            retryable: true,
        })
    });
    let mut failed = None;
    while let Some(part) = parts.recv().await {
        if let Err(e) = upload.wait_for_capacity(PARTS_IN_FLIGHT).await {
            failed = Some(Error::storage("write state blob", path, e));
            break;
        }
        upload.put(part);
    }
    // Closing the channel stops an encoder that is still sending.
    drop(parts);
    let written = match (failed, encoder.await) {
        (Some(e), _) | (None, Err(e)) => {
            // The object never appears; leftover parts are the store's to expire.
            let _ = upload.abort().await;
            return Err(e);
        }
        (None, Ok(written)) => written,
    };
    upload
        .finish()
        .await
        .map_err(|e| Error::storage("write state blob", path, e))?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    use super::*;

    fn state(rows: i64) -> RecordBatch {
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from_iter_values(0..rows)) as _),
            (
                "v",
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 7))) as _,
            ),
        ])
        .unwrap()
    }

    #[tokio::test]
    async fn a_state_of_many_parts_is_uploaded_whole_with_its_checksum() {
        let store = InMemory::new();
        let pool = PartPool::default();
        let path = Path::from("chk-1/agg/0.arrow");
        // 3M rows of two Int64 columns: 48 MB, six parts.
        let batch = state(3_000_000);
        let written = put_in_parts(&store, &path, batch.clone(), &pool)
            .await
            .unwrap();
        let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(written.bytes, bytes.len() as u64);
        assert!(bytes.len() > 5 * PART_BYTES, "{} bytes", bytes.len());
        assert_eq!(written.crc32, blob::checksum(&bytes));
        let back = blob::decode_verified(bytes.clone(), written.crc32, "state").unwrap();
        assert_eq!(back, batch);
        // The parts' buffers came back for the next blob, no more than kept.
        assert!(pool.kept() >= PARTS_IN_FLIGHT && pool.kept() <= KEPT_PARTS);
    }

    #[tokio::test]
    async fn a_state_smaller_than_a_part_is_one_part() {
        let store = InMemory::new();
        let path = Path::from("chk-1/agg/1.arrow");
        let batch = state(10);
        let written = put_in_parts(&store, &path, batch.clone(), &PartPool::default())
            .await
            .unwrap();
        let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(written.crc32, blob::checksum(&bytes));
        assert_eq!(
            blob::decode_verified(bytes.clone(), written.crc32, "state").unwrap(),
            batch
        );
    }
}
