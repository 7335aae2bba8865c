//! Throttles: sources held back, and let go.

use metrics::{counter, gauge};
use tracing::{info, warn};

use super::InternalEvent;

/// A throttle started holding sources back.
#[derive(Debug)]
pub struct ThrottlePaused<'a> {
    /// Which throttle (e.g. `replica-lag`).
    pub throttle: &'a str,
    /// Why, in words (e.g. "replica lag 12.0 s above 10.0 s").
    pub reason: &'a str,
}

impl InternalEvent for ThrottlePaused<'_> {
    fn emit(self) {
        warn!(
            throttle = self.throttle,
            "throttled: {}; sources pause", self.reason
        );
        counter!("tidewater_throttle_pauses_total", "throttle" => self.throttle.to_string())
            .increment(1);
        gauge!("tidewater_throttle_paused", "throttle" => self.throttle.to_string()).set(1.0);
    }
}

/// A throttle let sources go again.
#[derive(Debug)]
pub struct ThrottleResumed<'a> {
    /// Which throttle.
    pub throttle: &'a str,
    /// Why, in words.
    pub reason: &'a str,
}

impl InternalEvent for ThrottleResumed<'_> {
    fn emit(self) {
        info!(throttle = self.throttle, "{}; sources resume", self.reason);
        gauge!("tidewater_throttle_paused", "throttle" => self.throttle.to_string()).set(0.0);
    }
}

/// A throttle could not read what it watches; it keeps its last decision.
#[derive(Debug)]
pub struct ThrottleCheckFailed<'a> {
    /// Which throttle.
    pub throttle: &'a str,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for ThrottleCheckFailed<'_> {
    fn emit(self) {
        warn!(
            throttle = self.throttle,
            error = self.error,
            "cannot read the replica lag"
        );
        counter!("tidewater_throttle_check_failures_total", "throttle" => self.throttle.to_string())
            .increment(1);
    }
}

/// A replica-lag throttle read the lag (every poll: a gauge, no log line).
#[derive(Debug)]
pub struct ReplicaLagRead {
    /// The lag, in seconds.
    pub seconds: f64,
}

impl InternalEvent for ReplicaLagRead {
    fn emit(self) {
        gauge!("tidewater_replica_lag_seconds").set(self.seconds);
        super::live::replica_lag_read(self.seconds);
    }
}
