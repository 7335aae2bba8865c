//! Blob buffers kept from one checkpoint to the next, for object stores.
//!
//! A 1M-key aggregate writes a 32 MB blob every checkpoint, put whole to an
//! object store. Encoded into fresh memory, the kernel zeroes every new
//! page first, which cost about as much CPU as the encoding; a buffer kept
//! from the previous checkpoint is already mapped. (A local folder needs
//! none: its blobs are written as they are encoded, `local_write.rs`.)

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// At most this many buffers are kept...
const KEPT: usize = 8;
/// ...and only large ones: small blobs are cheap to allocate.
const KEPT_MIN_BYTES: usize = 1 << 20;

/// A shared pool of blob buffers.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlobBuffers {
    kept: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl BlobBuffers {
    /// A buffer to encode a blob of about `size` bytes into: for a large
    /// blob the largest kept one, else a new one.
    pub fn take(&self, size: usize) -> Vec<u8> {
        if size < KEPT_MIN_BYTES {
            return Vec::new();
        }
        let mut kept = self.lock();
        let largest = (0..kept.len()).max_by_key(|&i| kept[i].capacity());
        largest.map(|i| kept.swap_remove(i)).unwrap_or_default()
    }

    /// Keeps the buffer behind an uploaded blob, once the store let go of it.
    pub fn keep(&self, bytes: Bytes) {
        if bytes.len() < KEPT_MIN_BYTES {
            return;
        }
        if let Ok(mut buffer) = bytes.try_into_mut() {
            // Emptied first, so that turning it back into a Vec copies nothing.
            buffer.clear();
            let mut kept = self.lock();
            if kept.len() < KEPT {
                kept.push(buffer.into());
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        // A panic while holding the lock leaves a valid list of buffers.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_comes_back_with_its_memory() {
        let buffers = BlobBuffers::default();
        let blob = Bytes::from(vec![1u8; 2 << 20]);
        let address = blob.as_ptr();
        buffers.keep(blob);

        let again = buffers.take(2 << 20);
        assert_eq!(again.as_ptr(), address);
        assert!(again.is_empty() && again.capacity() >= 2 << 20);
        assert_eq!(buffers.take(2 << 20).capacity(), 0, "taken once only");

        // A blob that starts inside its buffer (aligned for direct I/O).
        let mut buffer = again;
        buffer.resize(3 << 20, 7);
        let address = buffer.as_ptr();
        let blob = Bytes::from(buffer).slice(100..);
        buffers.keep(blob);
        let back = buffers.take(2 << 20);
        assert_eq!(back.as_ptr(), address);
    }

    #[test]
    fn small_or_shared_blobs_are_not_kept() {
        let buffers = BlobBuffers::default();
        buffers.keep(Bytes::from(vec![0u8; 1000]));
        let shared = Bytes::from(vec![0u8; 2 << 20]);
        buffers.keep(shared.clone());
        assert_eq!(buffers.take(2 << 20).capacity(), 0);
        assert_eq!(
            buffers.take(10).capacity(),
            0,
            "small blobs get new buffers"
        );
        drop(shared);
    }
}
