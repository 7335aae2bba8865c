//! Crash hooks for tests: abort the process at a named instant of the
//! checkpoint protocol, where a random kill -9 rarely lands.
//!
//! `TIDEWATER_FAILPOINT=after-manifest@3` aborts right after checkpoint 3's
//! manifest is written and before its sink commits: the first time the point
//! is reached at checkpoint 3 or later. Points: `before-manifest`,
//! `after-manifest`, `mid-commit` (after the first of two or more commit
//! handles: at the first such checkpoint from 3 on), `after-commit`;
//! connectors add their own (the Kafka sink's `kafka-mid-transaction` and
//! `kafka-after-transaction`).
//!
//! A few points stall instead of aborting, as a process stopped with
//! SIGSTOP would: `store-mid-migration@0` stops the job store's opener
//! while its migration transaction holds the migration lock.
//! Unset (the normal case), a hook costs one load of a cached value.

use std::sync::OnceLock;

use crate::ids::CheckpointId;

fn armed() -> &'static Option<(String, u64)> {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("TIDEWATER_FAILPOINT").ok()?;
        let (name, id) = spec.split_once('@')?;
        Some((name.to_string(), id.parse().ok()?))
    })
}

/// Whether the armed failpoint is `name` (at any checkpoint): for a hook
/// that must prepare its instant (flush what it sent) before [`hit`].
pub fn is_armed(name: &str) -> bool {
    armed().as_ref().is_some_and(|(armed, _)| armed == name)
}

/// Aborts the process when the armed failpoint is `name` at `checkpoint` or
/// later (the first time it is reached there).
pub fn hit(name: &str, checkpoint: CheckpointId) {
    if let Some((armed, id)) = armed()
        && armed == name
        && checkpoint.0 >= *id
    {
        eprintln!("failpoint {name}@{id}: aborting the process");
        std::process::abort();
    }
}

/// Stalls the calling thread for good when the armed failpoint is `name`
/// (at any checkpoint id): the process looks to its peers and servers like
/// one stopped with SIGSTOP at this instant, without a test having to aim
/// a signal at it.
pub fn stall(name: &str) {
    if is_armed(name) {
        eprintln!("failpoint {name}: stalling the process");
        loop {
            std::thread::park();
        }
    }
}
