//! Column memory kept from one snapshot of an aggregate to the next.
//!
//! A 1M-key aggregate copies 32 MB of columns out of its table at every
//! checkpoint. Copied into fresh memory, the kernel first zeroes every new
//! page, which costs about as much CPU as the copy (the same reason the
//! checkpoint store reuses its upload parts, `checkpoint/upload.rs`). The
//! columns are handed out as Arrow buffers; once the upload has let go of
//! them, the next snapshot takes their memory back, up to [`KEPT_BYTES`].
//! Whole snapshots and deltas (incremental checkpoints) draw on the same
//! memory.

use arrow::buffer::Buffer;

/// Column memory kept for reuse, per aggregate instance: every column of a
/// 1M-key snapshot at parallelism 2 (16 MB a subtask) fits, with room.
/// Beyond it, columns are let go of once their upload ends. Keeping them
/// all kept a copy of the state resident between checkpoints: at 10M keys,
/// where a job's first deltas hold most keys, that copy (about 350 MB)
/// stayed beside the table's growth, which briefly holds old and new
/// memory, and peaks read 1.1-1.4x of a run without checkpoints; with
/// this bound, 1.01-1.12x (docs/benchmarks.md, thirty-sixth session). The
/// price: such a state's next base faults fresh pages in (at 10M keys, 1 s
/// incremental, +0.77% of CPU at the rate against +0.59% keeping columns
/// once the state stopped growing, whose peaks read up to 1.24x).
const KEPT_BYTES: usize = 32 << 20;

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

    /// An empty vector with room for `len` words.
    pub fn take(&mut self, len: usize) -> Vec<u64> {
        let mut words = self.free.pop().unwrap_or_default();
        words.reserve(len);
        words
    }

    /// `words` as a buffer for an output column, remembered so that a later
    /// [`reclaim`](Self::reclaim) can take its memory back, while what is
    /// kept stays within [`KEPT_BYTES`].
    pub fn lend(&mut self, words: Vec<u64>) -> Buffer {
        let bytes = words.capacity() * size_of::<u64>();
        let buffer = Buffer::from_vec(words);
        if self.kept_bytes() + bytes <= KEPT_BYTES {
            self.lent.push(buffer.clone());
        }
        buffer
    }

    /// The memory of the vectors kept and of the buffers lent and remembered.
    fn kept_bytes(&self) -> usize {
        let free = self.free.iter().map(|w| w.capacity() * size_of::<u64>());
        free.chain(self.lent.iter().map(Buffer::capacity)).sum()
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
    fn memory_beyond_the_kept_bytes_is_let_go_of_once_the_output_is_dropped() {
        let words_kept = KEPT_BYTES / size_of::<u64>();
        let mut spare = SpareColumns::default();
        // Half the budget is kept; the next column would go past it.
        let half = spare.lend(vec![1; words_kept / 2]);
        let whole = spare.lend(vec![2; words_kept]);
        let (half_at, whole_at) = (half.as_ptr(), whole.as_ptr());
        drop((half, whole));
        spare.reclaim();
        let kept = spare.take(1);
        assert_eq!(
            kept.as_ptr().cast::<u8>(),
            half_at,
            "the first column is kept"
        );
        assert_ne!(kept.as_ptr().cast::<u8>(), whole_at);
        assert_eq!(spare.take(0).capacity(), 0, "the second one is not");
    }
}
