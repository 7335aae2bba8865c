//! What the command line reports while a job runs, as typed events (the
//! core's [`InternalEvent`] pattern): each is logged in one place.

use tidewater_core::events::InternalEvent;
use tracing::{info, warn};

/// A progress line, without a terminal (`--progress plain`).
#[derive(Debug)]
pub struct ProgressReported {
    /// The line.
    pub line: String,
}

impl InternalEvent for ProgressReported {
    fn emit(self) {
        info!("{}", self.line);
    }
}

/// SIGINT or SIGTERM arrived: the job takes a savepoint and stops.
#[derive(Debug)]
pub struct CancelRequested {
    /// Which signal.
    pub signal: &'static str,
}

impl InternalEvent for CancelRequested {
    fn emit(self) {
        info!(
            signal = self.signal,
            "{}: taking a savepoint, then stopping", self.signal
        );
    }
}

/// The status file could not be written; the run goes on without it.
#[derive(Debug)]
pub struct StatusFileFailed<'a> {
    /// The file.
    pub path: &'a std::path::Path,
    /// Why.
    pub error: &'a anyhow::Error,
}

impl InternalEvent for StatusFileFailed<'_> {
    fn emit(self) {
        warn!(
            path = %self.path.display(),
            "cannot write the status file {}: {}; the run goes on without it",
            self.path.display(),
            self.error
        );
    }
}
