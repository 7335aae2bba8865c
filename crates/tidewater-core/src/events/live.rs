//! Figures the events keep readable inside the process, beside their
//! metrics: what a worker reports about itself to its job store (the
//! dashboard's replica-lag and dead-letter panels) without an exporter.
//!
//! They are process-wide, as metrics are: a process that runs several jobs
//! at once sees their sum (the `tidewater` CLI runs one job a process).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The last replica lag read, in µs plus one (0: none read yet).
static REPLICA_LAG_US: AtomicU64 = AtomicU64::new(0);
/// Rows and inputs set aside as dead letters.
static DEAD_LETTERED: AtomicU64 = AtomicU64::new(0);

pub(super) fn replica_lag_read(seconds: f64) {
    let us = (seconds.max(0.0) * 1e6) as u64;
    REPLICA_LAG_US.store(us.saturating_add(1), Ordering::Relaxed);
}

pub(super) fn dead_lettered() {
    DEAD_LETTERED.fetch_add(1, Ordering::Relaxed);
}

/// The last replica lag a throttle read in this process, if any did.
///
/// ```
/// // Nothing has read a replica's lag in this process.
/// assert_eq!(tidewater_core::events::live::replica_lag(), None);
/// ```
pub fn replica_lag() -> Option<Duration> {
    match REPLICA_LAG_US.load(Ordering::Relaxed) {
        0 => None,
        us => Some(Duration::from_micros(us - 1)),
    }
}

/// Rows (and unreadable inputs) this process set aside as dead letters.
pub fn rows_dead_lettered() -> u64 {
    DEAD_LETTERED.load(Ordering::Relaxed)
}
