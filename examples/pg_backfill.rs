//! The table backfill users name first: copy `src` into `dst` in key order,
//! transforming on the way, without double-writing a row or melting the primary.
//!
//! ```text
//! # fill src(id, k, v, s) with 10M generated rows (keys = 100000)
//! cargo run --release --example pg_backfill -- --seed 10000000 --source-url postgres://...
//! # backfill src → dst, w = v * 2 for rows with id % 3 != 0
//! cargo run --release --example pg_backfill -- --source-url postgres://... --sink-mode exactly-once
//! ```
//!
//! `dst(id bigint primary key, k bigint, v double precision, s text, w double precision)`
//! and the bookkeeping tables are created when missing. Exit codes: 0 complete,
//! 1 failed, 3 cancelled (run again to resume).

#[path = "support/copy_transform.rs"]
mod copy_transform;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use tidewater::RateLimit;
use tidewater::postgres::{LagSource, PostgresSink, PostgresSource, ReplicaLagThrottle, SinkMode};
use tidewater::prelude::*;
use tidewater_cli::runner;
use tidewater_cli::runner::{Interval, RunArgs, parse_interval};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SRC_DDL: &str = "CREATE TABLE IF NOT EXISTS src \
    (id bigint PRIMARY KEY, k bigint, v double precision, s text)";
const DST_DDL: &str = "CREATE TABLE IF NOT EXISTS dst \
    (id bigint PRIMARY KEY, k bigint, v double precision, s text, w double precision)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Idempotent INSERT ... ON CONFLICT DO UPDATE per batch.
    Upsert,
    /// One transaction per checkpoint, committed with the checkpoint.
    ExactlyOnce,
}

/// Backfill src into dst on PostgreSQL, checkpointed and resumable.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Create and fill `src` with this many generated rows, then exit.
    #[arg(long)]
    seed: Option<u64>,
    /// The database holding `src`.
    #[arg(long, env = "TIDEWATER_PG_PRIMARY")]
    source_url: String,
    /// The database receiving `dst` (default: the source's).
    #[arg(long)]
    sink_url: Option<String>,
    /// How `dst` is written.
    #[arg(long, value_enum, default_value = "exactly-once")]
    sink_mode: Mode,
    /// Pause reading while the replica lags more than this (`off` to disable).
    #[arg(long, default_value = "2s", value_parser = parse_interval)]
    max_replica_lag: Interval,
    /// Read the lag on this replica (default: `pg_stat_replication` on the source).
    #[arg(long)]
    replica_url: Option<String>,
    /// How often the replica lag is read.
    #[arg(long, default_value = "1s", value_parser = runner::parse_positive_duration)]
    lag_poll_interval: Duration,
    /// Read at most this many rows per second (above 0).
    #[arg(long, value_parser = parse_rate)]
    rows_per_second: Option<f64>,
    /// Rows `dst` refuses that may go to `tidewater_dead_letters` before the job fails.
    #[arg(long, default_value_t = 0)]
    max_bad_rows: u64,
    /// Rows per query on the source (at least 1).
    #[arg(long, default_value_t = 50_000, value_parser = runner::parse_at_least_one)]
    batch_rows: u64,
    #[command(flatten)]
    run: RunArgs,
}

/// Fills `src` by running a small tidewater job: generator → upsert sink.
/// A rate above zero.
fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .parse()
        .map_err(|e| format!("'{text}' is not a number: {e}"))?;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err("must be a number of rows per second above 0".into())
    }
}

async fn seed(args: &Args, rows: u64) -> anyhow::Result<ExitCode> {
    let sink = PostgresSink::builder(&args.source_url, "src", SinkMode::Upsert)
        .create_if_missing(SRC_DDL)
        .build()
        .await?;
    let pipeline = Pipeline::new("seed").with_parallelism(args.run.parallelism);
    pipeline
        .source(
            "generator",
            GeneratorSource::new(rows, 100_000).with_batch_rows(10_000),
        )
        .sink("src", sink);
    let state = tempfile::tempdir()?;
    let config =
        JobConfig::new(state.path().to_str().context("temp path")?)?.checkpoint_interval(None);
    match pipeline.build()?.run(config).await? {
        Outcome::Completed(_) => {
            println!("seeded src with {rows} rows");
            Ok(ExitCode::SUCCESS)
        }
        other => anyhow::bail!("seeding did not complete: {other:?}"),
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(rows) = args.seed {
        return seed(&args, rows).await;
    }
    let source = PostgresSource::builder(&args.source_url, "src", "id")
        .batch_rows(args.batch_rows as usize)
        .connections(args.run.parallelism as u32 + 1)
        .build()
        .await
        .context("opening the source table src")?;
    let sink_url = args
        .sink_url
        .clone()
        .unwrap_or_else(|| args.source_url.clone());
    let mode = match args.sink_mode {
        Mode::Upsert => SinkMode::Upsert,
        Mode::ExactlyOnce => SinkMode::ExactlyOnce,
    };
    let sink = PostgresSink::builder(&sink_url, "dst", mode)
        .create_if_missing(DST_DDL)
        .max_bad_rows(args.max_bad_rows)
        .build()
        .await
        .context("opening the target table dst")?;

    let pipeline = Pipeline::new("pg-backfill").with_parallelism(args.run.parallelism);
    let mut rows = pipeline.source("src", source);
    if let Some(high) = args.max_replica_lag.0 {
        let (url, at) = match &args.replica_url {
            Some(url) => (url.as_str(), LagSource::Replica),
            None => (args.source_url.as_str(), LagSource::Primary),
        };
        let poll = args.lag_poll_interval;
        rows = rows.throttle(ReplicaLagThrottle::new(url, at, high).poll_interval(poll));
    }
    if let Some(rate) = args.rows_per_second {
        // Each subtask gets its share of the rate.
        rows = rows.throttle(RateLimit::new(rate / args.run.parallelism as f64));
    }
    rows.filter("keep", copy_transform::keep_row)
        .map("add-w", copy_transform::add_w)
        .sink("dst", sink);

    let config = args.run.config()?;
    let reporting = args.run.reporting("table dst");
    runner::run_job(pipeline.build()?, config, &reporting).await
}

fn main() -> ExitCode {
    runner::init_logging();
    runner::main_with(run(Args::parse()))
}
