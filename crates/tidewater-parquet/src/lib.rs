//! Parquet connectors for tidewater, on any object store (a local folder,
//! `s3://`, `gs://`, `az://`).
//!
//! [`ParquetSource`] reads every Parquet file under a prefix, split by row
//! group, and resumes inside a row group after a restart.
//!
//! [`ParquetSink`] writes Parquet files with two-phase commit, at a target
//! size whatever the checkpoint interval: a file still being written is
//! carried across checkpoints (as a multipart upload on object stores) and
//! becomes visible only when the checkpoint after it is finished completes,
//! under a deterministic name, so a commit repeated after a crash changes
//! nothing.

mod object_reader;
mod sink;
mod source;

pub use sink::{ParquetSink, ParquetSinkOptions, describe_writer_state};
pub use source::{OnCorruptFile, ParquetSource, ParquetSourceBuilder};
