//! The main job: a backfill from the deterministic generator into Parquet.
//!
//! ```text
//! cargo run --release --example backfill -- --rows 10000000 --out ./tidewater-out
//! ```
//!
//! copy mode:      generator → filter(id % 3 != 0) → add w = v * 2 → Parquet
//! aggregate mode: generator → key_by(k) → count, sum(v), max(id) → Parquet
//!
//! Run it again with the same `--state` after a crash or a cancel (Ctrl-C) and
//! it resumes from its last checkpoint; over a completed job it says so and
//! exits 0. Exit codes: 0 complete, 1 failed, 3 cancelled (resumable).
//!
//! For benchmarks: `--engine fused` does the same work by hand (no graph, no
//! checkpoints), `--summary-json` writes what the run did, and `--status-file`
//! is rewritten every 20 ms with live progress.

#[path = "support/copy_transform.rs"]
mod copy_transform;

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use arrow::array::RecordBatch;
use arrow::compute::filter_record_batch;
use clap::{Parser, ValueEnum};
use tidewater::prelude::*;
use tidewater_cli::runner;
use tidewater_cli::runner::RunArgs;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Filter rows and add a column.
    Copy,
    /// Count, sum and max per key.
    Aggregate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// The tidewater pipeline, checkpointed.
    Framework,
    /// The hand-fused reference loop.
    Fused,
}

/// Backfill generated rows into Parquet, checkpointed and resumable.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// What the job does.
    #[arg(long, value_enum, default_value = "copy")]
    mode: Mode,
    /// Rows to generate.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Distinct keys (k = splitmix64(id) % keys), at least 1.
    #[arg(long, default_value_t = 100_000, value_parser = runner::parse_at_least_one)]
    keys: u64,
    /// Where the Parquet output goes: a folder or URL.
    #[arg(long, default_value = "./tidewater-out")]
    out: String,
    /// `framework`, or `fused`: the same work as one hand-written loop per
    /// thread, without checkpoints (the benchmarks' limit; local --out only).
    #[arg(long, value_enum, default_value = "framework")]
    engine: Engine,
    /// Output files are finished at this size (e.g. 128MiB), whatever the
    /// checkpoint interval.
    #[arg(long, default_value = "128MiB", value_parser = runner::parse_size)]
    target_file_size: u64,
    /// Read at most this many rows a second (default: as fast as it goes);
    /// slow runs change few keys between checkpoints.
    #[arg(long)]
    rows_per_second: Option<f64>,
    /// With --rows-per-second: read this many rows first as fast as they
    /// go (to build up keyed state), then hold the rate. Counted again from
    /// zero by every run of the job.
    #[arg(long, default_value_t = 0, requires = "rows_per_second")]
    throttle_after_rows: u64,
    #[command(flatten)]
    run: RunArgs,
}

fn build(args: &Args) -> anyhow::Result<Job> {
    let pipeline = Pipeline::new("backfill").with_parallelism(args.run.parallelism);
    let mut rows = pipeline.source("generator", GeneratorSource::new(args.rows, args.keys));
    if let Some(rate) = args.rows_per_second {
        rows = rows.throttle(AfterRows {
            unthrottled: AtomicU64::new(args.throttle_after_rows),
            limit: tidewater::RateLimit::new(rate),
        });
    }
    let sink = ParquetSink::open(&args.out)
        .with_context(|| format!("opening --out {}", args.out))?
        .with_options(ParquetSinkOptions {
            target_file_bytes: args.target_file_size,
            ..ParquetSinkOptions::default()
        });
    match args.mode {
        Mode::Copy => {
            rows.filter("keep", copy_transform::keep_row)
                .map("add-w", copy_transform::add_w)
                .sink("parquet", sink);
        }
        Mode::Aggregate => {
            let spec = AggregateSpec::new()
                .count("count")
                .sum("v", "sum_v")
                .max("id", "max_id");
            rows.key_by(["k"])
                .aggregate("aggregate", spec)
                .sink("parquet", sink);
        }
    }
    Ok(pipeline.build()?)
}

/// A rate limit that lets its first `unthrottled` rows through at once.
struct AfterRows {
    /// Rows still to let through unthrottled.
    unthrottled: AtomicU64,
    limit: tidewater::RateLimit,
}

#[async_trait::async_trait]
impl tidewater::Throttle for AfterRows {
    async fn admit(&self, rows: u64) -> Result<()> {
        let free = self
            .unthrottled
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                (left > 0).then(|| left.saturating_sub(rows))
            });
        match free {
            Ok(_) => Ok(()),
            Err(_) => self.limit.admit(rows).await,
        }
    }

    fn why_waiting(&self) -> Option<String> {
        self.limit.why_waiting()
    }
}

/// The hand-fused reference: the same work, no framework.
fn run_fused(args: &Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let out = std::path::Path::new(&args.out);
    let rows = match args.mode {
        Mode::Copy => {
            let schema = copy_transform::with_w(&GeneratorSource::new(0, 1).schema_ref());
            let transform = move |batch: &RecordBatch| -> Result<RecordBatch> {
                let mask = copy_transform::keep_row(batch)?;
                copy_transform::add_w(filter_record_batch(batch, &mask)?)
            };
            tidewater_bench::fused::copy(
                args.rows,
                args.keys,
                args.run.parallelism,
                out,
                schema,
                &transform,
            )?
        }
        Mode::Aggregate => {
            tidewater_bench::fused::aggregate(args.rows, args.keys, args.run.parallelism, out)?
        }
    };
    let elapsed = started.elapsed();
    println!(
        "fused: {rows} rows in {:.2}s ({:.2}M rows/s)",
        elapsed.as_secs_f64(),
        rows as f64 / elapsed.as_secs_f64() / 1e6
    );
    if let Some(path) = &args.run.summary_json {
        runner::write_json(
            path,
            &runner::summary_json("completed", None, elapsed, rows),
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = args.run.config()?;
    runner::run_job(build(&args)?, config, &args.run.reporting(&args.out)).await
}

fn main() -> ExitCode {
    runner::init_logging();
    let args = Args::parse();
    match args.engine {
        Engine::Framework => runner::main_with(run(args)),
        Engine::Fused => runner::exit_code(run_fused(&args)),
    }
}
