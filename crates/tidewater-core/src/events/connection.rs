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
            "{} connection lost; retrying",
            self.what
        );
        counter!("tidewater_connection_retries_total", "what" => self.what.to_string())
            .increment(1);
    }
}
