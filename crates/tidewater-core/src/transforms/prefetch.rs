//! A hint to start loading a table entry that a loop needs a few rows later.
//!
//! The aggregate's lookups land at random in tables larger than the cache;
//! asking for row `i + LOOKAHEAD`'s entry while row `i` is processed keeps
//! several loads in flight instead of waiting for each.

/// How many rows ahead the group index and the per-accumulator loops
/// prefetch (`row_update` asks for the next block of rows instead).
pub(crate) const LOOKAHEAD: usize = 16;

/// Starts loading `table[index]` into the cache (a no-op when out of range
/// or on targets without a prefetch instruction).
#[inline(always)]
pub(crate) fn prefetch<T>(table: &[T], index: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(entry) = table.get(index) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch only
        // hints the cache: it never faults, and `entry` is a valid reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((entry as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (table, index);
}
