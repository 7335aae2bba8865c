//! `ReplicaLagThrottle`: pauses sources while a streaming replica is behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tidewater_core::events::{
    InternalEvent, ReplicaLagRead, ThrottleCheckFailed, ThrottlePaused, ThrottleResumed,
};
use tidewater_core::{Error, Result, Throttle};
use tokio::sync::{Notify, OnceCell};

use crate::connect::{Timeouts, parse_url, probe, session};
use crate::errors::db_error;

/// Where the lag is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagSource {
    /// On the primary: the largest `replay_lag` in `pg_stat_replication`.
    Primary,
    /// On the replica: the age of the last replayed commit, while WAL is
    /// waiting to be replayed (0 when caught up).
    Replica,
}

const PRIMARY_LAG: &str = "SELECT COALESCE(MAX(EXTRACT(EPOCH FROM replay_lag)), 0)::float8 \
                           FROM pg_stat_replication";
const REPLICA_LAG: &str = "SELECT CASE WHEN pg_last_wal_receive_lsn() IS NULL \
                                    OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 \
                           ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) \
                           END::float8";

/// Whether to be paused after reading `lag`: pause above `high`, resume below `low`.
pub fn next_paused(paused: bool, lag: f64, high: f64, low: f64) -> bool {
    if paused { lag >= low } else { lag > high }
}

/// Pauses sources while the replica lag is above a high mark, until it falls
/// below a low mark (half the high mark by default). The lag is polled in the
/// background every `poll` (default 1 s).
///
/// While paused, a source still answers checkpoints and cancels. Every pause
/// and resume is logged: `throttled: replica lag 3.2s > 2s`.
#[derive(Debug, Clone)]
pub struct ReplicaLagThrottle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    url: String,
    source: LagSource,
    high: Duration,
    low: Duration,
    poll: Duration,
    paused: AtomicBool,
    /// The last lag read, as f64 bits.
    last_lag: std::sync::atomic::AtomicU64,
    resumed: Notify,
    poller: OnceCell<()>,
}

impl Inner {
    fn new(url: String, source: LagSource, high: Duration, low: Duration, poll: Duration) -> Self {
        Inner {
            url,
            source,
            high,
            low,
            poll,
            paused: AtomicBool::new(false),
            last_lag: std::sync::atomic::AtomicU64::new(0),
            resumed: Notify::new(),
            poller: OnceCell::new(),
        }
    }
}

impl ReplicaLagThrottle {
    /// Pauses while the lag read at `url` (as `source` says) exceeds `high`.
    pub fn new(url: &str, source: LagSource, high: Duration) -> Self {
        ReplicaLagThrottle {
            inner: Arc::new(Inner::new(
                url.to_string(),
                source,
                high,
                high / 2,
                Duration::from_secs(1),
            )),
        }
    }

    /// Applies a setting. A throttle shared with a clone (or already in
    /// use) is not changed under the clone's feet: this one becomes a
    /// throttle of its own, with the clone's settings and this change.
    fn configure(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| {
            Inner::new(
                shared.url.clone(),
                shared.source,
                shared.high,
                shared.low,
                shared.poll,
            )
        });
        f(&mut inner);
        ReplicaLagThrottle {
            inner: Arc::new(inner),
        }
    }

    /// Resumes only below this lag (default: half the high mark).
    pub fn low_mark(self, low: Duration) -> Self {
        self.configure(|i| i.low = low)
    }

    /// How often the lag is read (default 1 s).
    pub fn poll_interval(self, poll: Duration) -> Self {
        self.configure(|i| i.poll = poll)
    }

    /// Whether sources are paused now.
    pub fn is_paused(&self) -> bool {
        self.inner.paused.load(Ordering::Acquire)
    }

    async fn start(&self) -> Result<()> {
        check_marks(self.inner.high, self.inner.low)?;
        let options = parse_url(&self.inner.url, "the replica-lag throttle")?;
        probe(&options, "the replica-lag throttle").await?;
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(session(
                &options,
                "tidewater/replica-lag",
                Timeouts::default(),
                true,
            ))
            .await
            .map_err(|e| db_error("connecting to read the replica lag", e))?;
        let lag = read_lag(&pool, self.inner.source).await?;
        self.apply(lag);
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let poll = inner.poll;
                drop(inner);
                tokio::time::sleep(poll).await;
                let Some(inner) = weak.upgrade() else { return };
                match read_lag(&pool, inner.source).await {
                    Ok(lag) => ReplicaLagThrottle { inner }.apply(lag),
                    // Keep the last decision: a missed poll is not a reason to flood the primary.
                    Err(e) => ThrottleCheckFailed {
                        throttle: "replica-lag",
                        error: &e.to_string(),
                    }
                    .emit(),
                }
            }
        });
        Ok(())
    }

    fn apply(&self, lag: f64) {
        let inner = &self.inner;
        let (high, low) = (inner.high.as_secs_f64(), inner.low.as_secs_f64());
        inner.last_lag.store(lag.to_bits(), Ordering::Release);
        ReplicaLagRead { seconds: lag }.emit();
        let was = inner.paused.load(Ordering::Acquire);
        let now = next_paused(was, lag, high, low);
        if now != was {
            inner.paused.store(now, Ordering::Release);
            if now {
                ThrottlePaused {
                    throttle: "replica-lag",
                    reason: &format!("replica lag {lag:.1}s > {high:.1}s"),
                }
                .emit();
            } else {
                ThrottleResumed {
                    throttle: "replica-lag",
                    reason: &format!("replica lag {lag:.1}s < {low:.1}s"),
                }
                .emit();
                inner.resumed.notify_waiters();
            }
        }
    }
}

async fn read_lag(pool: &PgPool, source: LagSource) -> Result<f64> {
    let sql = match source {
        LagSource::Primary => PRIMARY_LAG,
        LagSource::Replica => REPLICA_LAG,
    };
    let (lag,): (f64,) = sqlx::query_as(sql)
        .fetch_one(pool)
        .await
        .map_err(|e| db_error("reading the replica lag", e))?;
    Ok(lag)
}

#[async_trait]
impl Throttle for ReplicaLagThrottle {
    fn why_waiting(&self) -> Option<String> {
        self.is_paused().then(|| {
            let lag = f64::from_bits(self.inner.last_lag.load(Ordering::Acquire));
            format!(
                "replica lag {lag:.1}s > {:.1}s",
                self.inner.high.as_secs_f64()
            )
        })
    }

    async fn admit(&self, _rows: u64) -> Result<()> {
        self.inner.poller.get_or_try_init(|| self.start()).await?;
        loop {
            let resumed = self.inner.resumed.notified();
            if !self.is_paused() {
                return Ok(());
            }
            resumed.await;
        }
    }
}

/// Refuses marks that cannot work: a throttle that resumes only below a
/// lag above the one it pauses at would flap, and a zero high mark pauses
/// for any lag at all.
fn check_marks(high: Duration, low: Duration) -> Result<()> {
    if high.is_zero() {
        return Err(Error::InvalidPipeline(
            "replica-lag throttle: the high mark is 0, so any lag would pause the sources; \
             give a high mark above zero (e.g. 10s)"
                .into(),
        ));
    }
    if low > high {
        return Err(Error::InvalidPipeline(format!(
            "replica-lag throttle: the low mark ({low:?}) is above the high mark ({high:?}); \
             sources pause above the high mark and resume below the low one, so the low mark \
             must be at most the high mark"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_above_the_high_mark_and_resumes_below_the_low_mark() {
        let (high, low) = (2.0, 1.0);
        let steps = [
            (false, 0.5, false),
            (false, 2.0, false),
            (false, 2.1, true),
            (true, 1.5, true),
            (true, 1.0, true),
            (true, 0.9, false),
        ];
        for (paused, lag, expected) in steps {
            assert_eq!(
                next_paused(paused, lag, high, low),
                expected,
                "{paused} {lag}"
            );
        }
    }

    #[test]
    fn configuring_a_cloned_throttle_leaves_the_clone_as_it_was() {
        let first = ReplicaLagThrottle::new(
            "postgres://127.0.0.1:1/none",
            LagSource::Primary,
            Duration::from_secs(10),
        );
        let clone = first.clone();
        let second = first.low_mark(Duration::from_secs(2));
        assert_eq!(second.inner.low, Duration::from_secs(2));
        assert_eq!(clone.inner.low, Duration::from_secs(5));
        assert!(!Arc::ptr_eq(&second.inner, &clone.inner));
    }

    #[test]
    fn marks_that_cannot_work_are_refused() {
        let s = Duration::from_secs;
        assert!(check_marks(s(10), s(5)).is_ok());
        assert!(check_marks(s(10), s(10)).is_ok());
        let err = check_marks(s(5), s(10)).unwrap_err().to_string();
        assert!(
            err.contains("low mark") && err.contains("above the high mark"),
            "{err}"
        );
        let err = check_marks(s(0), s(0)).unwrap_err().to_string();
        assert!(err.contains("high mark is 0"), "{err}");
    }
}
