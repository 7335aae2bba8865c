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

/// The run took its job's lease in the job store.
#[derive(Debug)]
pub struct LeaseTaken<'a> {
    /// The job's id in the store.
    pub id: i64,
    /// Its name.
    pub name: &'a str,
    /// The lease's epoch: the run's fencing token.
    pub epoch: u64,
    /// The store's URL, without a password.
    pub store: &'a str,
}

impl InternalEvent for LeaseTaken<'_> {
    fn emit(self) {
        info!(
            job_id = self.id,
            job = self.name,
            epoch = self.epoch,
            store = self.store,
            "job {} holds its lease at epoch {}",
            self.id,
            self.epoch
        );
        metrics::counter!("tidewater_leases_taken_total").increment(1);
    }
}

/// A heartbeat could not reach the job store; the run goes on until its
/// lease's deadline.
#[derive(Debug)]
pub struct LeaseRenewFailed<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for LeaseRenewFailed<'_> {
    fn emit(self) {
        warn!(
            "cannot renew the lease: {}; retrying (the run stops committing if it cannot \
             renew before its lease may run out)",
            self.error
        );
        metrics::counter!("tidewater_lease_renewal_failures_total").increment(1);
    }
}

/// The lease's heartbeat could not start (no thread or runtime for it):
/// nothing renews the lease, so the run stops committing when it may have
/// run out.
#[derive(Debug)]
pub struct HeartbeatNotStarted<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for HeartbeatNotStarted<'_> {
    fn emit(self) {
        warn!(
            "the lease's heartbeat could not start: {}; nothing renews the lease, so the run \
             stops committing before it may run out and a later run resumes the job",
            self.error
        );
        metrics::counter!("tidewater_lease_renewal_failures_total").increment(1);
    }
}

/// The job store says the lease is no longer this run's.
#[derive(Debug)]
pub struct LeaseLost<'a> {
    /// What happened.
    pub why: &'a str,
}

impl InternalEvent for LeaseLost<'_> {
    fn emit(self) {
        warn!("lost the lease: {}; stopping without committing", self.why);
        metrics::counter!("tidewater_leases_lost_total").increment(1);
    }
}

/// Someone cancelled the job through the job store.
#[derive(Debug)]
pub struct CancelSeen {
    /// `cancel --discard`: no savepoint.
    pub discard: bool,
}

impl InternalEvent for CancelSeen {
    fn emit(self) {
        if self.discard {
            info!(
                "the job was cancelled in the job store with --discard: stopping now, \
                 discarding what the last checkpoint does not hold"
            );
        } else {
            info!("the job was cancelled in the job store: taking a savepoint, then stopping");
        }
    }
}

/// A job that succeeded has an empty state location now: its record is
/// dropped and the job runs anew.
#[derive(Debug)]
pub struct JobForgotten<'a> {
    /// The old record's id.
    pub id: i64,
    /// The job's name.
    pub name: &'a str,
    /// Its state location.
    pub state: &'a str,
}

impl InternalEvent for JobForgotten<'_> {
    fn emit(self) {
        info!(
            job_id = self.id,
            job = self.name,
            "job {} ('{}') succeeded before, but {} holds none of its checkpoints now: \
             running it anew",
            self.id,
            self.name,
            self.state
        );
    }
}

/// How the run ended could not be written to the job store.
#[derive(Debug)]
pub struct JobEndNotRecorded<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for JobEndNotRecorded<'_> {
    fn emit(self) {
        warn!(
            "cannot record how the job ended in the job store: {}; `tidewater status` shows \
             it RUNNING until its lease runs out, and the next run takes it over",
            self.error
        );
    }
}

/// Completed checkpoints could not be recorded in the job store (tried
/// again at the next heartbeat: the checkpoints themselves are intact).
#[derive(Debug)]
pub struct CheckpointsNotRecorded<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for CheckpointsNotRecorded<'_> {
    fn emit(self) {
        warn!(
            "cannot record checkpoints in the job store: {}; retrying at the next heartbeat",
            self.error
        );
    }
}

/// A sample of the run's figures could not be written to the job store
/// (the dashboard's charts miss a point; the run goes on).
#[derive(Debug)]
pub struct SampleNotRecorded<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for SampleNotRecorded<'_> {
    fn emit(self) {
        warn!(
            "cannot record a sample in the job store: {}; trying again at the next heartbeat",
            self.error
        );
    }
}

/// The heartbeat renewed the lease.
#[derive(Debug)]
pub struct LeaseRenewed {
    /// The lease's epoch.
    pub epoch: u64,
    /// How much later than planned the heartbeat woke (a busy process).
    pub late: std::time::Duration,
    /// How long the store took to answer.
    pub took: std::time::Duration,
}

impl InternalEvent for LeaseRenewed {
    fn emit(self) {
        tracing::debug!(
            epoch = self.epoch,
            late_ms = self.late.as_millis() as u64,
            took_ms = self.took.as_millis() as u64,
            "lease renewed"
        );
        metrics::counter!("tidewater_lease_renewals_total").increment(1);
    }
}

/// The HTTP API is listening.
#[derive(Debug)]
pub struct ApiListening {
    /// Where.
    pub addr: std::net::SocketAddr,
    /// Whether changes need a token.
    pub token: bool,
}

impl InternalEvent for ApiListening {
    fn emit(self) {
        info!(
            token = self.token,
            "HTTP API listening on http://{}/api/v1/jobs (metrics at /metrics)", self.addr
        );
    }
}

/// The HTTP API stopped serving on an error.
#[derive(Debug)]
pub struct ApiStopped<'a> {
    /// Why.
    pub error: &'a (dyn std::error::Error + 'a),
}

impl InternalEvent for ApiStopped<'_> {
    fn emit(self) {
        warn!("the HTTP API stopped: {}", self.error);
    }
}

/// `serve --run` started a worker for a job.
#[derive(Debug)]
pub struct WorkerStarted {
    /// The job.
    pub job: i64,
    /// The worker's pid.
    pub pid: u32,
}

impl InternalEvent for WorkerStarted {
    fn emit(self) {
        info!(
            job = self.job,
            pid = self.pid,
            "started a worker for job {}",
            self.job
        );
        metrics::counter!("tidewater_workers_started_total").increment(1);
    }
}

/// A worker of `serve --run` exited.
#[derive(Debug)]
pub struct WorkerExited<'a> {
    /// The job.
    pub job: i64,
    /// How it exited.
    pub status: &'a str,
}

impl InternalEvent for WorkerExited<'_> {
    fn emit(self) {
        info!(
            job = self.job,
            "the worker of job {} exited: {}", self.job, self.status
        );
    }
}
