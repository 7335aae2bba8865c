//! Live counters of a running job, shared with its handle.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::checkpoint::CheckpointKind;

/// How many checkpoints [`Progress::checkpoint_history`] keeps: at one a
/// second, the last hour and more.
pub(crate) const HISTORY_LIMIT: usize = 4096;

/// What one completed checkpoint cost.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointStats {
    /// Its id.
    pub id: u64,
    /// Why it was taken.
    pub kind: CheckpointKind,
    /// From trigger to manifest written.
    pub duration: Duration,
    /// Bytes of state written.
    pub state_bytes: u64,
    /// When it was triggered (this machine's clock, ms since the Unix epoch).
    pub triggered_at_ms: u64,
    /// Where its time went.
    pub phases: CheckpointPhases,
}

/// Where a checkpoint's time went. The first three overlap across tasks
/// (each is the slowest task's), so they need not add up to the duration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointPhases {
    /// From the trigger until the last task had its barrier (aligned, for
    /// a task with several inputs) and began its snapshot.
    pub align: Duration,
    /// The slowest task's snapshot: its operators' state and its sink's pre-commit.
    pub snapshot: Duration,
    /// The slowest task's encoding and upload of its state.
    pub upload: Duration,
    /// Checking the epoch and writing the manifest.
    pub manifest: Duration,
    /// Committing the sinks' work, after the manifest (not in the duration).
    pub commit: Duration,
}

/// Counters a job updates as it runs; read them through [`JobHandle::progress`](crate::JobHandle::progress).
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    rows_read: AtomicU64,
    rows_restored: AtomicU64,
    rows_written: AtomicU64,
    rows_total: AtomicU64,
    checkpoints: AtomicU64,
    last_checkpoint: AtomicU64,
    rows_at_last_checkpoint: AtomicU64,
    last_checkpoint_at_ms: AtomicU64,
    last_checkpoint_ms: AtomicU64,
    /// Milliseconds from start to the first batch a source emitted, plus one (0: none yet).
    first_batch_ms: AtomicU64,
    /// Time source subtasks waited on throttles, ongoing waits included.
    throttled: Mutex<ThrottleClock>,
    history: Mutex<VecDeque<CheckpointStats>>,
    /// The checkpoint this run restored, plus one (0: it started fresh).
    restored_from: AtomicU64,
    /// Checkpoints the restore passed over as unreadable.
    fallbacks: AtomicU64,
}

/// A consistent-enough reading of [`Progress`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressSnapshot {
    /// Rows the sources emitted, including those before a restore.
    pub rows_read: u64,
    /// Of those, the rows read before the checkpoint this run restored
    /// (0 when it started from the beginning): `rows_read - rows_restored`
    /// is this run's work, what a rate is made of.
    pub rows_restored: u64,
    /// Rows sinks received in this run.
    pub rows_written: u64,
    /// The sources' row estimate (0 when unknown).
    pub rows_total: u64,
    /// Checkpoints completed in this run.
    pub checkpoints: u64,
    /// The id of the last completed checkpoint (0 when none).
    pub last_checkpoint: u64,
    /// How long the last checkpoint took, from trigger to manifest.
    pub last_checkpoint_duration: Duration,
    /// Rows read since the last completed checkpoint: what a crash now would redo.
    pub exposure_rows: u64,
    /// Time since the last completed checkpoint (or the start).
    pub exposure: Duration,
    /// Time since the job started in this process.
    pub elapsed: Duration,
    /// Time from start to the first batch read in this run (after any restore).
    pub first_batch_after: Option<Duration>,
    /// Time source subtasks spent held by their throttles (rate limit,
    /// replica lag), summed over subtasks: a throttled job shows it growing.
    pub throttled: Duration,
    /// Source subtasks waiting on a throttle at this moment.
    pub throttled_sources: u64,
    /// What holds the sources that have waited a while (`replica lag 3.2s >
    /// 2.0s`, `rate limit 50000 rows/s`), each once.
    pub throttled_by: Vec<String>,
    /// The checkpoint this run restored (None: it started fresh).
    pub restored_from: Option<u64>,
    /// Checkpoints the restore passed over as unreadable or corrupt.
    pub fallbacks: u64,
}

/// Throttle waits, in microseconds since the job's start.
#[derive(Debug, Default)]
struct ThrottleClock {
    /// Waits that ended, summed.
    ended_us: u64,
    /// Waits going on now...
    waiting: u64,
    /// ...and the sum of the instants they began: at `now` they have lasted
    /// `waiting * now - began_us`, so a source held for minutes in one wait
    /// shows it growing.
    began_us: u64,
    /// What holds each wait going on now, with when it began.
    reasons: Vec<(u64, String)>,
    /// What held waits that ended, each with when its last such wait ended.
    recent: Vec<(u64, String)>,
}

/// Waits shorter than this are a throttle letting rows through, not holding them.
const HOLDING_US: u64 = 5_000;
/// A reason is shown for this long after its last holding wait ended: a
/// rate limit holds a source in many short waits.
const RECENT_US: u64 = 1_000_000;

/// Counts a source subtask as throttled while it lives.
pub(crate) struct ThrottleWait<'a> {
    progress: &'a Progress,
    began_us: u64,
    reason: Option<String>,
}

impl Drop for ThrottleWait<'_> {
    fn drop(&mut self) {
        let now = self.progress.micros();
        let mut clock = self.progress.lock_throttled();
        clock.waiting -= 1;
        clock.began_us -= self.began_us;
        if let Some(reason) = self.reason.take() {
            if let Some(at) = clock
                .reasons
                .iter()
                .position(|(began, r)| *began == self.began_us && *r == reason)
            {
                clock.reasons.swap_remove(at);
            }
            if now.saturating_sub(self.began_us) >= HOLDING_US {
                clock.recent.retain(|(_, r)| *r != reason);
                clock.recent.push((now, reason));
            }
        }
        clock.ended_us += now.saturating_sub(self.began_us);
    }
}

impl Progress {
    pub(crate) fn new(rows_already_read: u64) -> Self {
        Progress {
            started: Instant::now(),
            rows_read: AtomicU64::new(rows_already_read),
            rows_restored: AtomicU64::new(rows_already_read),
            rows_written: AtomicU64::new(0),
            rows_total: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            last_checkpoint: AtomicU64::new(0),
            rows_at_last_checkpoint: AtomicU64::new(rows_already_read),
            last_checkpoint_at_ms: AtomicU64::new(0),
            last_checkpoint_ms: AtomicU64::new(0),
            first_batch_ms: AtomicU64::new(0),
            throttled: Mutex::default(),
            history: Mutex::new(VecDeque::new()),
            restored_from: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        }
    }

    pub(crate) fn mark_first_batch(&self) {
        if self.first_batch_ms.load(Ordering::Relaxed) == 0 {
            let ms = self.started.elapsed().as_millis() as u64 + 1;
            let _ =
                self.first_batch_ms
                    .compare_exchange(0, ms, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The checkpoints completed in this run, oldest first: the last 4096 of
    /// them (a stream runs for weeks; the count of all of them is in
    /// [`ProgressSnapshot::checkpoints`] and the metrics).
    pub fn checkpoint_history(&self) -> Vec<CheckpointStats> {
        self.checkpoints_after(0)
    }

    /// The checkpoints in [`Progress::checkpoint_history`] with an id past `id`.
    pub fn checkpoints_after(&self, id: u64) -> Vec<CheckpointStats> {
        self.history
            .lock()
            .map(|h| h.iter().filter(|c| c.id > id).cloned().collect())
            .unwrap_or_default()
    }

    /// Marks one source subtask as waiting on its throttles until the guard
    /// drops; the wait counts as throttled time from now on. `reason` is
    /// what holds it, shown once the wait lasts.
    pub(crate) fn throttle_wait(&self, reason: Option<String>) -> ThrottleWait<'_> {
        let began_us = self.micros();
        let mut clock = self.lock_throttled();
        clock.waiting += 1;
        clock.began_us += began_us;
        if let Some(r) = &reason {
            clock.reasons.push((began_us, r.clone()));
        }
        ThrottleWait {
            progress: self,
            began_us,
            reason,
        }
    }

    fn micros(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    fn lock_throttled(&self) -> std::sync::MutexGuard<'_, ThrottleClock> {
        // The clock's fields stay consistent under each lock: a panic
        // elsewhere leaves it usable.
        self.throttled.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add_read(&self, rows: u64) {
        self.rows_read.fetch_add(rows, Ordering::Relaxed);
    }

    pub(crate) fn add_written(&self, rows: u64) {
        self.rows_written.fetch_add(rows, Ordering::Relaxed);
    }

    pub(crate) fn set_total(&self, rows: u64) {
        self.rows_total.store(rows, Ordering::Relaxed);
    }

    /// What the restore gave: rows already read, the checkpoint resumed
    /// (None: fresh) and how many checkpoints it fell back past.
    pub(crate) fn set_baseline(&self, rows_read: u64, checkpoint: Option<u64>, fallbacks: usize) {
        let checkpoint_or_zero = checkpoint.unwrap_or(0);
        self.restored_from
            .store(checkpoint.map_or(0, |c| c + 1), Ordering::Relaxed);
        self.fallbacks.store(fallbacks as u64, Ordering::Relaxed);
        self.rows_read.store(rows_read, Ordering::Relaxed);
        self.rows_restored.store(rows_read, Ordering::Relaxed);
        self.rows_at_last_checkpoint
            .store(rows_read, Ordering::Relaxed);
        self.last_checkpoint
            .store(checkpoint_or_zero, Ordering::Relaxed);
    }

    pub(crate) fn checkpoint_completed(&self, stats: CheckpointStats, rows_read: u64) {
        let (id, took) = (stats.id, stats.duration);
        if let Ok(mut history) = self.history.lock() {
            if history.len() == HISTORY_LIMIT {
                history.pop_front();
            }
            history.push_back(stats);
        }
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.last_checkpoint.store(id, Ordering::Relaxed);
        self.rows_at_last_checkpoint
            .store(rows_read, Ordering::Relaxed);
        self.last_checkpoint_ms
            .store(took.as_millis() as u64, Ordering::Relaxed);
        self.last_checkpoint_at_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub(crate) fn rows_read(&self) -> u64 {
        self.rows_read.load(Ordering::Relaxed)
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let elapsed = self.started.elapsed();
        let rows_read = self.rows_read.load(Ordering::Relaxed);
        let at_checkpoint = self.rows_at_last_checkpoint.load(Ordering::Relaxed);
        let last_at = Duration::from_millis(self.last_checkpoint_at_ms.load(Ordering::Relaxed));
        let (throttled_us, throttled_sources, mut throttled_by) = {
            let now = self.micros();
            let clock = self.lock_throttled();
            let ongoing = (clock.waiting * now).saturating_sub(clock.began_us);
            let ongoing_reasons = clock
                .reasons
                .iter()
                .filter(|(began, _)| now.saturating_sub(*began) >= HOLDING_US);
            let recent_reasons = clock
                .recent
                .iter()
                .filter(|(ended, _)| now.saturating_sub(*ended) <= RECENT_US);
            let holding: Vec<String> = ongoing_reasons
                .chain(recent_reasons)
                .map(|(_, r)| r.clone())
                .collect();
            (clock.ended_us + ongoing, clock.waiting, holding)
        };
        throttled_by.sort();
        throttled_by.dedup();
        ProgressSnapshot {
            rows_read,
            rows_restored: self.rows_restored.load(Ordering::Relaxed),
            rows_written: self.rows_written.load(Ordering::Relaxed),
            rows_total: self.rows_total.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            last_checkpoint: self.last_checkpoint.load(Ordering::Relaxed),
            last_checkpoint_duration: Duration::from_millis(
                self.last_checkpoint_ms.load(Ordering::Relaxed),
            ),
            exposure_rows: rows_read.saturating_sub(at_checkpoint),
            exposure: elapsed.saturating_sub(last_at),
            elapsed,
            first_batch_after: match self.first_batch_ms.load(Ordering::Relaxed) {
                0 => None,
                ms => Some(Duration::from_millis(ms - 1)),
            },
            throttled: Duration::from_micros(throttled_us),
            throttled_sources,
            throttled_by,
            restored_from: self.restored_from.load(Ordering::Relaxed).checked_sub(1),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_history_keeps_the_newest_checkpoints_only() {
        let progress = Progress::new(0);
        for id in 1..=(HISTORY_LIMIT as u64 + 10) {
            progress.checkpoint_completed(
                CheckpointStats {
                    id,
                    kind: CheckpointKind::Periodic,
                    duration: Duration::from_millis(1),
                    state_bytes: 0,
                    triggered_at_ms: 0,
                    phases: Default::default(),
                },
                id,
            );
        }
        let history = progress.checkpoint_history();
        assert_eq!(history.len(), HISTORY_LIMIT);
        assert_eq!(history[0].id, 11);
        assert_eq!(
            history.last().map(|c| c.id),
            Some(HISTORY_LIMIT as u64 + 10)
        );
        assert_eq!(progress.snapshot().checkpoints, HISTORY_LIMIT as u64 + 10);
    }
    use super::*;

    #[test]
    fn a_wait_counts_while_it_lasts_and_after_it_ends() {
        let progress = Progress::new(0);
        let wait = progress.throttle_wait(Some("replica lag 3.2s > 2.0s".into()));
        let quick = progress.throttle_wait(Some("rate limit 10 rows/s".into()));
        assert!(
            progress.snapshot().throttled_by.is_empty(),
            "a new wait is not holding yet"
        );
        drop(quick);
        std::thread::sleep(Duration::from_millis(30));
        let during = progress.snapshot();
        assert_eq!(during.throttled_sources, 1);
        assert!(during.throttled >= Duration::from_millis(30), "{during:?}");
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(
            progress.snapshot().throttled_by,
            ["replica lag 3.2s > 2.0s"]
        );
        drop(wait);
        let after = progress.snapshot();
        assert_eq!(after.throttled_sources, 0);
        // Shown for a second after a wait that held, for the many short
        // waits of a rate limit.
        assert_eq!(after.throttled_by, ["replica lag 3.2s > 2.0s"]);
        assert!(after.throttled >= Duration::from_millis(110), "{after:?}");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            progress.snapshot().throttled,
            after.throttled,
            "ended waits stay put"
        );
    }
}
