//! # tidewater
//!
//! Checkpointed, resumable data pipelines for bulk backfills: Flink's
//! checkpoint model for Arrow record batches, in a Rust library.
//!
//! A pipeline moves [`RecordBatch`](arrow::record_batch::RecordBatch)es from
//! sources through transforms into transactional or idempotent sinks. A
//! coordinator injects checkpoint barriers that snapshot source cursors and
//! operator state to object storage; after a crash, a deploy or a cancel, the
//! job resumes from its last complete checkpoint and every sink effect is
//! applied exactly once.
//!
//! ```no_run
//! use tidewater::prelude::*;
//!
//! # async fn run() -> tidewater::Result<()> {
//! let pipeline = Pipeline::new("rollup").with_parallelism(2);
//! pipeline
//!     .source("generator", GeneratorSource::new(10_000_000, 100_000))
//!     .key_by(["k"])
//!     .aggregate("per-key", AggregateSpec::new().count("count").sum("v", "sum_v"))
//!     .sink("out", ParquetSink::open("./out")?);
//! let outcome = pipeline.build()?.run(JobConfig::new("./tidewater-state")?).await?;
//! println!("{outcome:?}");
//! # Ok(()) }
//! ```
//!
//! See `docs/guide.md` for writing pipelines and operators, and
//! `docs/architecture.md` for how checkpoints work.

pub use tidewater_core::*;
#[cfg(feature = "parquet")]
pub use tidewater_parquet as parquet;
#[cfg(feature = "postgres")]
pub use tidewater_postgres as postgres;

/// The names most pipelines use.
pub mod prelude {
    pub use tidewater_core::{
        AggregateSpec, Collector, GeneratorSource, Job, JobConfig, Operator, Outcome, Pipeline,
        Result, TaskContext,
    };
    #[cfg(feature = "parquet")]
    pub use tidewater_parquet::{ParquetSink, ParquetSinkOptions};
}
