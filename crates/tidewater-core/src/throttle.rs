//! Throttles: consulted by a source before each fetch, so a backfill can be
//! held below a rate or paused while a replica catches up.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::Result;

/// Decides when a source may fetch its next batch.
///
/// A source task waits on [`admit`](Throttle::admit) before each fetch; while
/// it waits it still answers checkpoint barriers and cancels, so a paused
/// source never blocks a checkpoint.
#[async_trait]
pub trait Throttle: Send + Sync + 'static {
    /// Returns when the next fetch may go ahead. `rows` is the size of the
    /// batch fetched last (0 before the first). Must be cancel-safe: the
    /// runtime drops the future to take a checkpoint and calls again.
    async fn admit(&self, rows: u64) -> Result<()>;

    /// What would hold a fetch now, in words (`replica lag 3.2s > 2.0s`),
    /// for progress displays; `None` when nothing would. Shown only for
    /// waits that last.
    fn why_waiting(&self) -> Option<String> {
        None
    }
}

/// Holds a source at or below a number of rows per second (token bucket
/// with a one-second burst).
///
/// # Examples
///
/// ```
/// let limit = tidewater_core::RateLimit::new(50_000.0);
/// assert_eq!(limit.rows_per_second(), 50_000.0);
/// ```
#[derive(Debug)]
pub struct RateLimit {
    rows_per_second: f64,
    state: Mutex<(Instant, f64)>,
}

impl RateLimit {
    /// At most `rows_per_second` rows per second (clamped to at least 1).
    pub fn new(rows_per_second: f64) -> Self {
        let rate = rows_per_second.max(1.0);
        RateLimit {
            rows_per_second: rate,
            state: Mutex::new((Instant::now(), rate)),
        }
    }

    /// The configured rate.
    pub fn rows_per_second(&self) -> f64 {
        self.rows_per_second
    }
}

#[async_trait]
impl Throttle for RateLimit {
    fn why_waiting(&self) -> Option<String> {
        Some(format!("rate limit {} rows/s", self.rows_per_second))
    }

    async fn admit(&self, rows: u64) -> Result<()> {
        // Cancel-safe: the rows are debited only when admitted, so a wait
        // interrupted by a checkpoint and started again costs nothing extra.
        loop {
            let wait = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                let tokens = (state.1
                    + now.duration_since(state.0).as_secs_f64() * self.rows_per_second)
                    .min(self.rows_per_second);
                *state = (now, tokens);
                // A batch larger than the burst is admitted once the bucket is full.
                let needed = (rows as f64).min(self.rows_per_second);
                if tokens >= needed {
                    state.1 = tokens - rows as f64;
                    return Ok(());
                }
                Duration::from_secs_f64((needed - tokens) / self.rows_per_second)
            };
            tracing::trace!(wait_ms = wait.as_millis() as u64, "throttled: rate limit");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn rate_limit_holds_the_average_rate() {
        let limit = RateLimit::new(10_000.0);
        let start = Instant::now();
        // 50 batches of 1000 rows = 50k rows: ~4 s after the 1 s burst.
        for _ in 0..50 {
            limit.admit(1000).await.unwrap();
        }
        let took = start.elapsed().as_secs_f64();
        assert!((3.8..=5.2).contains(&took), "took {took}s");
    }

    #[tokio::test(start_paused = true)]
    async fn an_interrupted_wait_costs_nothing_extra() {
        // The source drops the wait whenever a checkpoint comes in, then asks again.
        let limit = RateLimit::new(1000.0);
        limit.admit(1000).await.unwrap(); // the burst
        for _ in 0..20 {
            let interrupted =
                tokio::time::timeout(Duration::from_millis(10), limit.admit(1000)).await;
            assert!(interrupted.is_err());
        }
        let start = Instant::now();
        limit.admit(1000).await.unwrap();
        // 200 ms already passed in the interrupted waits: 800 ms left, not more.
        let took = start.elapsed().as_secs_f64();
        assert!(took <= 0.85, "took {took}s");
    }
}
