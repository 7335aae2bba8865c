//! The job store: one trait, and where a store is opened from a URL.
//!
//! `sqlite://PATH` (the default, [`default_url`]) keeps the records in a
//! local file for the processes of one machine; `postgres://...` in a
//! database that many processes on many machines share.

mod sql;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use crate::lease::Owner;
use crate::record::{
    CheckpointRecord, Ending, Heartbeat, JobId, JobRecord, NewJob, Report, Sample, Submitted,
};
use crate::state::{IllegalTransition, JobState};

pub use sql::SqlStore;

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be opened.
    #[error("cannot open the job store {url}: {detail}")]
    Open {
        /// The store's URL (without a password).
        url: String,
        /// Why.
        detail: String,
    },
    /// A query failed.
    #[error("the job store failed {what}: {source}")]
    Query {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// No job is called that.
    #[error("no job '{0}' in the job store; `tidewater jobs` lists them")]
    NotFound(String),
    /// Several jobs have that name (with different state locations).
    #[error("several jobs are called '{name}' (ids {ids}); name one by its id")]
    Ambiguous {
        /// The name asked for.
        name: String,
        /// Their ids.
        ids: String,
    },
    /// Another process holds the job's lease.
    #[error(
        "job {id} ('{name}') is running: {owner} holds its lease, which runs out in {expires_in:.0?} \
         unless renewed; wait for it, cancel it (`tidewater cancel {id}`), or take it over with \
         --steal if that process is gone for good"
    )]
    Held {
        /// The job.
        id: JobId,
        /// Its name.
        name: String,
        /// The holder.
        owner: Owner,
        /// Until the lease runs out.
        expires_in: Duration,
    },
    /// The job's state does not allow it.
    #[error("job {id}: {source}")]
    Illegal {
        /// The job.
        id: JobId,
        /// What was refused.
        #[source]
        source: IllegalTransition,
    },
    /// The lease moved on: a newer epoch holds the job.
    #[error("job {id}: {why}")]
    Fenced {
        /// The job.
        id: JobId,
        /// What happened.
        why: String,
    },
}

/// Where jobs are recorded: submitted, leased, reported on, ended.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Records a job, QUEUED; or finds the one with the same idempotency
    /// key, or with the same name and state location.
    async fn submit(&self, job: NewJob) -> Result<Submitted, StoreError>;

    /// The job with this id.
    async fn get(&self, id: JobId) -> Result<JobRecord, StoreError>;

    /// The job called `name_or_id` (an id, or a name that one job has).
    async fn find(&self, name_or_id: &str) -> Result<JobRecord, StoreError>;

    /// Every job (in one state, if given), newest first.
    async fn list(&self, state: Option<JobState>) -> Result<Vec<JobRecord>, StoreError>;

    /// Takes the job's lease for `ttl` and makes it RUNNING, with an epoch
    /// past both the store's and `min_epoch` (the newest in its state
    /// store). Refused while another live process holds it, unless `steal`.
    async fn take_lease(
        &self,
        id: JobId,
        me: &Owner,
        ttl: Duration,
        min_epoch: u64,
        steal: bool,
    ) -> Result<JobRecord, StoreError>;

    /// Renews the lease of epoch `epoch` and records `report`.
    async fn heartbeat(
        &self,
        id: JobId,
        epoch: u64,
        me: &Owner,
        ttl: Duration,
        report: &Report,
    ) -> Result<Heartbeat, StoreError>;

    /// Records how the run of `epoch` ended and releases its lease; refused
    /// with [`StoreError::Fenced`] when a newer epoch holds the job.
    async fn finish(
        &self,
        id: JobId,
        epoch: u64,
        ending: Ending,
        report: &Report,
    ) -> Result<JobRecord, StoreError>;

    /// Deletes the record of a job that ended (SUCCEEDED, FAILED or
    /// CANCELLED): for a job whose state location was emptied, so that the
    /// same spec can start it anew.
    async fn forget(&self, id: JobId) -> Result<(), StoreError>;

    /// Records completed checkpoints of the run of `epoch` (ignored when
    /// a newer epoch holds the job; one already recorded is kept).
    async fn record_checkpoints(
        &self,
        id: JobId,
        epoch: u64,
        checkpoints: &[CheckpointRecord],
    ) -> Result<(), StoreError>;

    /// The job's last `limit` recorded checkpoints, oldest first.
    async fn checkpoints(
        &self,
        id: JobId,
        limit: usize,
    ) -> Result<Vec<CheckpointRecord>, StoreError>;

    /// Records what the run of `epoch` reports now (ignored when a newer
    /// epoch holds the job).
    async fn record_sample(&self, id: JobId, sample: &Sample) -> Result<(), StoreError>;

    /// The job's last `limit` samples, over all its runs, oldest first.
    async fn samples(&self, id: JobId, limit: usize) -> Result<Vec<Sample>, StoreError>;

    /// Asks the job to stop: a QUEUED job is CANCELLED at once, a RUNNING
    /// one CANCELLING (its worker sees it at its next heartbeat).
    async fn cancel(&self, id: JobId, discard: bool) -> Result<JobRecord, StoreError>;
}

/// The store used when none is given: `sqlite://` under the user's data
/// folder (`$XDG_DATA_HOME/tidewater/jobs.sqlite`, else
/// `~/.local/share/tidewater/jobs.sqlite`).
pub fn default_url() -> String {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    format!(
        "sqlite://{}",
        base.join("tidewater").join("jobs.sqlite").display()
    )
}

/// Opens (creating and migrating as needed) the store at `url`.
pub async fn open(url: &str) -> Result<Box<dyn JobStore>, StoreError> {
    Ok(Box::new(SqlStore::open(url).await?))
}
