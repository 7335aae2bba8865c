//! tidewater's job store: the records of jobs that outlive the processes
//! that run them.
//!
//! A job moves through the [state machine](transition) of DESIGN.md; a
//! worker runs it only while it holds its [lease](lease), whose epoch is the
//! fencing token every commit of the run carries (the checkpoint manifest,
//! the sinks' commits). Records live in SQLite (one machine, the default) or
//! PostgreSQL (shared by many), behind one [`JobStore`] trait.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tidewater_jobs::StoreError> {
//! use tidewater_jobs::{NewJob, Owner};
//!
//! let store = tidewater_jobs::open("sqlite:///tmp/jobs.sqlite").await?;
//! let submitted = store
//!     .submit(NewJob {
//!         name: "backfill".into(),
//!         state_url: "./tidewater-state".into(),
//!         spec: String::new(),
//!         spec_path: None,
//!         idempotency_key: None,
//!     })
//!     .await?;
//! let ttl = std::time::Duration::from_secs(30);
//! let job = store
//!     .take_lease(submitted.job().id, &Owner::this_process(), ttl, 0, false)
//!     .await?;
//! println!("running job {} at epoch {}", job.id, job.epoch);
//! # Ok(()) }
//! ```

pub mod lease;
mod record;
mod state;
mod store;

pub use lease::{LeaseClock, Owner};
pub use record::{
    CheckpointRecord, Ending, Heartbeat, JobError, JobId, JobRecord, NewJob, Report, Sample,
    Submitted,
};
pub use state::{IllegalTransition, JobEvent, JobState, transition};
pub use store::{JobStore, SqlStore, StoreError, default_url, open};
