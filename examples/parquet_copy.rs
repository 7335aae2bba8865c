//! Copies every Parquet file under `--input` to `--output`: the same columns
//! and rows (in any order), in files of `--target-file-size`, checkpointed and
//! resumable.
//!
//! ```text
//! cargo run --release --example parquet_copy -- \
//!     --input s3://lake/events/ --output s3://lake/events-copy/ \
//!     --state s3://lake/_tidewater/events-copy --checkpoint-interval 1s
//! ```
//!
//! Run it again with the same `--state` after a crash or a cancel and it
//! resumes inside the row group it was reading. Exit codes: 0 complete,
//! 1 failed, 3 cancelled (resumable). Object-store credentials come from the
//! environment (docs/connectors/parquet.md).

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tidewater::parquet::{OnCorruptFile, ParquetSource};
use tidewater::prelude::*;
use tidewater_cli::runner;
use tidewater_cli::runner::RunArgs;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Copy a folder of Parquet files, checkpointed and resumable.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where the files are: a folder or URL (s3://bucket/prefix, ...).
    #[arg(long)]
    input: String,
    /// Only the files whose path below --input matches this glob
    /// (default: every *.parquet outside folders starting with _ or .).
    #[arg(long)]
    glob: Option<String>,
    /// Where the copies go: a folder or URL.
    #[arg(long)]
    output: String,
    /// Output files are finished at this size (e.g. 128MiB), whatever the
    /// checkpoint interval.
    #[arg(long, default_value = "128MiB", value_parser = runner::parse_size)]
    target_file_size: u64,
    /// Skip unreadable files and row groups, recording each under this folder
    /// or URL, instead of failing.
    #[arg(long)]
    dead_letters: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

async fn build(args: &Args) -> anyhow::Result<Job> {
    let mut source = ParquetSource::builder(&args.input);
    if let Some(glob) = &args.glob {
        source = source.glob(glob);
    }
    if let Some(at) = &args.dead_letters {
        source = source.on_corrupt_file(OnCorruptFile::DeadLetter(at.clone()));
    }
    let source = source
        .build()
        .await
        .with_context(|| format!("reading --input {}", args.input))?;
    tracing::info!(
        files = source.files().len(),
        rows = source.total_rows(),
        "copying"
    );
    let sink = ParquetSink::open(&args.output)
        .with_context(|| format!("opening --output {}", args.output))?
        .with_options(ParquetSinkOptions {
            target_file_bytes: args.target_file_size,
            ..ParquetSinkOptions::default()
        });
    let pipeline = Pipeline::new("parquet-copy").with_parallelism(args.run.parallelism);
    pipeline.source("files", source).sink("parquet", sink);
    Ok(pipeline.build()?)
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.run.config()?;
    runner::run_job(
        build(&args).await?,
        config,
        &args.run.reporting(&args.output),
    )
    .await
}

fn main() -> ExitCode {
    runner::init_logging();
    runner::main_with(run(Args::parse()))
}
