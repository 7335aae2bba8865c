//! Connections to outside systems lost and tried again.

use metrics::counter;
use tracing::warn;

use super::InternalEvent;

/// A connection was lost and is tried again.
#[derive(Debug)]
pub struct ConnectionRetried<'a> {
    /// What the connection serves (e.g. `postgres source`).
    pub what: &'a str,
    /// Which endpoint or table.
    pub target: &'a str,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How many retries there are before the error fails the run.
    pub of: u32,
    /// The wait before this retry.
    pub backoff: std::time::Duration,
    /// Why.
    pub error: &'a str,
}

impl InternalEvent for ConnectionRetried<'_> {
    fn emit(self) {
        warn!(
            what = self.what,
            target = self.target,
            attempt = self.attempt,
            error = self.error,
            "{} connection lost; retrying in {:?} (retry {} of {}; after that the run fails \
             and restarts from its last checkpoint, up to the job's max_restarts)",
            self.what,
            self.backoff,
            self.attempt,
            self.of
        );
        counter!("tidewater_connection_retries_total", "what" => self.what.to_string())
            .increment(1);
    }
}
