//! tidewater-core: the pipeline API, the runtime, the checkpoint coordinator and
//! the state store of [tidewater](https://docs.rs/tidewater).
//!
//! A [`Pipeline`] declares sources, transforms and sinks, each with a stable
//! uid; [`Pipeline::build`] freezes it into a [`Job`]; [`Job::start`] runs it
//! on tokio, checkpointing to object storage, and resumes it from the newest
//! valid checkpoint when run again with the same state location.

pub mod checkpoint;
mod error;
pub mod events;
pub mod failpoint;
mod ids;
mod operator;
pub mod partition;
mod pipeline;
mod rows;
mod runtime;
mod sink;
mod source;
pub mod sources;
pub mod state;
mod store_url;
mod throttle;
pub mod transforms;

pub use checkpoint::restore::RestoreOptions;
pub use error::{Domain, Error, Result, field_list};
pub use ids::{CheckpointId, Epoch};
pub use operator::{Collector, Operator, OperatorFactory, StateChanges, TaskContext};
pub use pipeline::{KeyedStream, Partitioning, Pipeline, SinkRef, Stream};
pub use rows::row_json;
pub use runtime::{
    CheckpointPhases, CheckpointStats, Job, JobConfig, JobControl, JobHandle, Lease, Outcome,
    Progress, ProgressSnapshot, Summary,
};
pub use sink::{CommitHandle, Sink, SinkWriter};
pub use source::{Cursor, Source, Split, SplitReader};
pub use sources::generator::{GeneratorSource, splitmix64};
pub use store_url::{StoreLocation, local_file, open_location, redact_url};
pub use throttle::{RateLimit, Throttle};
pub use transforms::aggregate::{AggregateExpr, AggregateFunction, AggregateSpec};
