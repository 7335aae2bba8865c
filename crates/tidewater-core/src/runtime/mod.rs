//! The runtime: tasks on tokio joined by bounded channels, and the checkpoint
//! coordinator that drives them.

mod chain;
mod config;
mod coordinator;
mod describe;
mod handle;
pub(crate) mod input_gate;
mod job;
mod lateness;
pub(crate) mod message;
mod output;
mod progress;
mod rescale;
mod restore;
mod task;
mod wiring;

pub use config::{JobConfig, Lease};
pub use handle::{JobControl, JobHandle, Outcome, Summary};
pub use job::Job;
pub use progress::{CheckpointPhases, CheckpointStats, Progress, ProgressSnapshot};
