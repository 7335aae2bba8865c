//! Column memory kept from one snapshot of an aggregate to the next.
//!
//! A 1M-key aggregate copies 32 MB of columns out of its table at every
//! checkpoint. Copied into fresh memory, the kernel first zeroes every new
//! page, which costs about as much CPU as the copy (the same reason the
//! checkpoint store reuses its upload parts, `checkpoint/upload.rs`). The
//! columns are handed out as Arrow buffers; once the upload has let go of
//! them, the next snapshot takes their memory back. Whole snapshots and
//! deltas (incremental checkpoints) draw on the same memory.

use arrow::buffer::Buffer;

/// Word vectors for output columns, reused across outputs.
#[derive(Default)]
pub(crate) struct SpareColumns {
    /// Buffers of earlier outputs, possibly still read elsewhere.
    lent: Vec<Buffer>,
    /// Emptied vectors, ready to fill.
    free: Vec<Vec<u64>>,
}

impl SpareColumns {
    /// Takes back the memory of earlier outputs that nothing reads any more;
    /// a buffer still in use is let go of.
    pub fn reclaim(&mut self) {
        for buffer in self.lent.drain(..) {
            if let Ok(mut words) = buffer.into_vec::<u64>() {
                words.clear();
                self.free.push(words);
            }
        }
    }

    /// An empty vector with room for `len` words: a kept one if it fits,
    /// else a fresh one. A kept vector too small is let go of first: growing
    /// it would copy its old capacity, empty as it is, while holding both,
    /// and growth by doubling would keep up to twice the state. Its
    /// replacement has an eighth more room, so that a state growing a
    /// little does not need fresh memory at every snapshot.
    pub fn take(&mut self, len: usize) -> Vec<u64> {
        match self.free.pop() {
            Some(words) if words.capacity() >= len => words,
            Some(_) => Vec::with_capacity(len + len / 8),
            None => Vec::with_capacity(len),
        }
    }

    /// `words` as a buffer for an output column, remembered so that a later
    /// [`reclaim`](Self::reclaim) can take its memory back.
    pub fn lend(&mut self, words: Vec<u64>) -> Buffer {
        let buffer = Buffer::from_vec(words);
        self.lent.push(buffer.clone());
        buffer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_comes_back_once_the_output_is_dropped_and_not_before() {
        let mut spare = SpareColumns::default();
        let mut words = spare.take(1000);
        words.extend(0..1000u64);
        let output = spare.lend(words);

        // Still read by the output: let go of, nothing comes back.
        spare.reclaim();
        assert_eq!(spare.take(0).capacity(), 0, "no vector kept");
        assert_eq!(
            output.typed_data::<u64>()[999],
            999,
            "the output is untouched"
        );

        // Dropped before the reclaim: the same memory comes back, emptied.
        let mut words = spare.take(1000);
        words.extend(0..1000u64);
        let output = spare.lend(words);
        let address = output.as_ptr();
        drop(output);
        spare.reclaim();
        let again = spare.take(10);
        assert_eq!(again.as_ptr().cast::<u8>(), address);
        assert!(again.is_empty() && again.capacity() >= 1000);
    }

    #[test]
    fn a_kept_vector_too_small_is_replaced_not_grown() {
        let mut spare = SpareColumns::default();
        let output = spare.lend(vec![1u64; 100]);
        drop(output);
        spare.reclaim();
        let words = spare.take(800);
        assert_eq!(
            words.capacity(),
            900,
            "the length and an eighth, not double"
        );
        assert_eq!(spare.take(50).capacity(), 50, "the small one is not kept");
    }
}
