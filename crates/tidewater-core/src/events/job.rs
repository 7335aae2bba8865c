//! A job's life: starting, restarting after an error, fenced off, ending.

use std::time::Duration;

use metrics::counter;
use tracing::{info, warn};

use super::InternalEvent;

/// A run of the job starts (after claiming its epoch).
#[derive(Debug)]
pub struct JobStarting<'a> {
    /// The job.
    pub job: &'a str,
    /// The epoch claimed.
    pub epoch: u64,
    /// Where its state lives.
    pub state: &'a str,
}

impl InternalEvent for JobStarting<'_> {
    fn emit(self) {
        info!(
            job = self.job,
            epoch = self.epoch,
            state = self.state,
            "job starting"
        );
        counter!("tidewater_runs_started_total", "job" => self.job.to_string()).increment(1);
    }
}

/// A run failed with a retryable error; the job restarts from its last checkpoint.
#[derive(Debug)]
pub struct JobRestarting<'a> {
    /// The job.
    pub job: &'a str,
    /// Why.
    pub error: &'a crate::Error,
    /// This restart, from 1.
    pub restart: u32,
    /// The most restarts allowed.
    pub of: u32,
    /// The wait before it.
    pub backoff: Duration,
}

impl InternalEvent for JobRestarting<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            error = %self.error,
            restart = self.restart,
            of = self.of,
            backoff_ms = self.backoff.as_millis() as u64,
            "job failed with a retryable error; restarting from the last checkpoint"
        );
        counter!("tidewater_job_restarts_total", "job" => self.job.to_string()).increment(1);
    }
}

/// This worker found a newer epoch: another worker took the job over.
#[derive(Debug)]
pub struct JobFenced<'a> {
    /// The job.
    pub job: &'a str,
    /// This worker's epoch.
    pub mine: u64,
    /// The newer one.
    pub newer: u64,
}

impl InternalEvent for JobFenced<'_> {
    fn emit(self) {
        warn!(
            job = self.job,
            mine = self.mine,
            newer = self.newer,
            "fenced: a newer worker took the job over; this run stops"
        );
        counter!("tidewater_fenced_total", "job" => self.job.to_string()).increment(1);
    }
}

/// How a run ended, when it ended well.
#[derive(Debug)]
pub enum JobCompleted<'a> {
    /// All input processed, final checkpoint committed.
    Complete {
        /// The job.
        job: &'a str,
        /// The final checkpoint.
        checkpoint: u64,
    },
    /// The job had completed in an earlier run.
    AlreadyComplete {
        /// The job.
        job: &'a str,
        /// Its final checkpoint.
        checkpoint: u64,
    },
    /// Stopped at a savepoint; a later run resumes from it.
    Cancelled {
        /// The job.
        job: &'a str,
        /// The savepoint.
        savepoint: u64,
    },
    /// Stopped without a savepoint; a later run resumes from the last checkpoint.
    Discarded {
        /// The job.
        job: &'a str,
        /// The checkpoint a later run resumes from (`None`: the start).
        resumes_from: Option<u64>,
    },
}

impl InternalEvent for JobCompleted<'_> {
    fn emit(self) {
        let (job, outcome) = match self {
            JobCompleted::Complete { job, checkpoint } => {
                info!(job, checkpoint, "job complete");
                (job, "completed")
            }
            JobCompleted::AlreadyComplete { job, checkpoint } => {
                info!(job, checkpoint, "the job already completed; nothing to do");
                (job, "already_complete")
            }
            JobCompleted::Cancelled { job, savepoint } => {
                info!(job, savepoint, "job cancelled at a savepoint");
                (job, "cancelled")
            }
            JobCompleted::Discarded { job, resumes_from } => {
                info!(
                    job,
                    resumes_from, "job stopped without a savepoint; uncommitted work discarded"
                );
                (job, "discarded")
            }
        };
        counter!("tidewater_runs_ended_total", "job" => job.to_string(), "outcome" => outcome)
            .increment(1);
    }
}
