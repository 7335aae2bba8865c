//! Periodic checkpoints behind their schedule. At most one checkpoint is in
//! flight, so a state store slower than the interval delays the next one
//! instead of queueing snapshots in memory: this decides when a delay is
//! worth reporting, and how often to say so in the log.

use std::time::{Duration, Instant};

/// How long after it was `due` a periodic checkpoint that starts at `now`
/// started, when that is more than a quarter of its `interval` (and more
/// than the timer's own jitter); `None` when it is on time.
pub(crate) fn late_by(due: Instant, now: Instant, interval: Duration) -> Option<Duration> {
    let behind = now.saturating_duration_since(due);
    (behind > interval / 4 && behind >= Duration::from_millis(5)).then_some(behind)
}

/// Warns of delayed checkpoints once a minute at most (a store too slow
/// for a 1 s interval would otherwise fill the log with a line a second);
/// the metrics count every one.
#[derive(Debug, Default)]
pub(crate) struct DelayLog {
    last_said: Option<Instant>,
    unsaid: u64,
}

/// The least time between two warnings of delayed checkpoints.
const SAY_EVERY: Duration = Duration::from_secs(60);

impl DelayLog {
    /// Counts a delayed checkpoint at `now`; returns how many delays the
    /// warning due now reports (this one included), or `None` when no
    /// warning is due yet.
    pub(crate) fn note(&mut self, now: Instant) -> Option<u64> {
        self.unsaid += 1;
        let due = self
            .last_said
            .is_none_or(|last| now.saturating_duration_since(last) >= SAY_EVERY);
        if !due {
            return None;
        }
        self.last_said = Some(now);
        Some(std::mem::take(&mut self.unsaid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_late_past_a_quarter_of_its_interval() {
        let due = Instant::now();
        let ms = Duration::from_millis;
        // (interval, started after due, late by)
        let cases = [
            (ms(1000), ms(0), None),
            (ms(1000), ms(250), None),
            (ms(1000), ms(251), Some(ms(251))),
            (ms(1000), ms(4000), Some(ms(4000))),
            (ms(10), ms(3), None),
            (ms(10), ms(5), Some(ms(5))),
            (ms(10_000), ms(2000), None),
        ];
        for (interval, after, expected) in cases {
            assert_eq!(
                late_by(due, due + after, interval),
                expected,
                "{interval:?} {after:?}"
            );
        }
        // A tick seen before its deadline is not late.
        assert_eq!(late_by(due + ms(5), due, ms(1000)), None);
    }

    #[test]
    fn delays_are_warned_of_once_a_minute_with_how_many_there_were() {
        let start = Instant::now();
        let s = Duration::from_secs;
        let mut log = DelayLog::default();
        // (seconds from start, warning due)
        let steps = [
            (0, Some(1)),
            (1, None),
            (2, None),
            (59, None),
            (60, Some(4)),
            (61, None),
            (200, Some(2)),
        ];
        for (at, expected) in steps {
            assert_eq!(log.note(start + s(at)), expected, "at {at} s");
        }
    }
}
