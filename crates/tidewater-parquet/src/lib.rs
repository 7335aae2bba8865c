//! Parquet connectors for tidewater, on any object store.
//!
//! [`ParquetSink`] writes Parquet files with two-phase commit: files are staged
//! under `_staging/` and renamed into place only when the checkpoint that
//! covers their rows is complete, under deterministic names, so a commit
//! repeated after a crash changes nothing.

mod sink;

pub use sink::{ParquetSink, ParquetSinkOptions};
