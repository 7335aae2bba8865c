//! The runtime: tasks on tokio joined by bounded channels, and the checkpoint
//! coordinator that drives them.

mod chain;
mod coordinator;
pub(crate) mod input_gate;
mod job;
pub(crate) mod message;
mod output;
mod progress;
mod restore;
mod task;

pub use job::{Job, JobConfig, JobControl, JobHandle, Outcome, Summary};
pub use progress::{CheckpointStats, Progress, ProgressSnapshot};
