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

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::kernels::cmp::neq;
use arrow::compute::kernels::numeric::{mul, rem};
use arrow::datatypes::{DataType, Field, Schema};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tidewater::prelude::*;
use tidewater::{Error, ProgressSnapshot};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Filter rows and add a column.
    Copy,
    /// Count, sum and max per key.
    Aggregate,
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
    /// Distinct keys (k = splitmix64(id) % keys).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Time between checkpoints (e.g. 500ms, 1s, 10s), or `off`.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    checkpoint_interval: Interval,
    /// Subtasks per operator.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Where checkpoints go: a folder or URL.
    #[arg(long, default_value = "./tidewater-state")]
    state: String,
    /// Where the Parquet output goes: a folder or URL.
    #[arg(long, default_value = "./tidewater-out")]
    out: String,
}

/// A checkpoint interval; `None` is `off`.
#[derive(Debug, Clone, Copy)]
struct Interval(Option<Duration>);

fn parse_interval(text: &str) -> Result<Interval, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Interval(None));
    }
    let interval = humantime::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a duration like 500ms, 1s or 10s, nor 'off': {e}"))?;
    if interval.is_zero() {
        return Err("the checkpoint interval must be above zero; use 'off' to disable".into());
    }
    Ok(Interval(Some(interval)))
}

fn output_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new("s", DataType::Utf8, false),
        Field::new("w", DataType::Float64, false),
    ]))
}

fn keep_row(batch: &RecordBatch) -> Result<BooleanArray> {
    let id = batch
        .column_by_name("id")
        .ok_or_else(|| Error::BadInput("no column 'id'".into()))?;
    let three = arrow::array::Int64Array::new_scalar(3);
    let zero = arrow::array::Int64Array::new_scalar(0);
    Ok(neq(&rem(id, &three)?, &zero)?)
}

fn add_w(batch: RecordBatch, schema: &Arc<Schema>) -> Result<RecordBatch> {
    let v = batch
        .column_by_name("v")
        .ok_or_else(|| Error::BadInput("no column 'v'".into()))?;
    let w = mul(v, &arrow::array::Float64Array::new_scalar(2.0))?;
    let mut columns = batch.columns().to_vec();
    columns.push(w);
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn build(args: &Args) -> anyhow::Result<Job> {
    let pipeline = Pipeline::new("backfill").with_parallelism(args.parallelism);
    let rows = pipeline.source("generator", GeneratorSource::new(args.rows, args.keys));
    let sink =
        ParquetSink::open(&args.out).with_context(|| format!("opening --out {}", args.out))?;
    match args.mode {
        Mode::Copy => {
            let schema = output_schema();
            rows.filter("keep", keep_row)
                .map("add-w", move |batch| add_w(batch, &schema))
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

fn progress_line(p: &ProgressSnapshot) -> String {
    let rate = p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3);
    format!(
        "{}/{} rows, {:.2}M rows/s, {} checkpoints (last #{}, {} ms), {} rows since",
        p.rows_read,
        p.rows_total,
        rate / 1e6,
        p.checkpoints,
        p.last_checkpoint,
        p.last_checkpoint_duration.as_millis(),
        p.exposure_rows
    )
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = JobConfig::new(&args.state)
        .with_context(|| format!("opening --state {}", args.state))?
        .checkpoint_interval(args.checkpoint_interval.0);
    let handle = build(&args)?.start(config);
    let control = handle.control();
    let join = handle.join();
    tokio::pin!(join);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(args.rows);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {percent:>3}% {msg}").expect("valid template"),
        );
        bar
    });
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut ticks = 0u64;
    let outcome = loop {
        let signal = tokio::select! {
            outcome = &mut join => break outcome,
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            _ = ticker.tick() => {
                let p = control.progress();
                match &bar {
                    Some(bar) => {
                        bar.set_length(p.rows_total.max(1));
                        bar.set_position(p.rows_read);
                        bar.set_message(progress_line(&p));
                    }
                    // Without a terminal, a log line every 5 s.
                    None if ticks % 5 == 4 => tracing::info!("{}", progress_line(&p)),
                    None => {}
                }
                ticks += 1;
                continue;
            }
        };
        tracing::info!("{signal}: taking a savepoint, then stopping");
        control.cancel();
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match outcome? {
        Outcome::Completed(summary) => {
            let p = &summary.progress;
            println!(
                "done: {} rows read, {} rows written in {:.1}s ({:.2}M rows/s), {} checkpoints, \
                 resumed from {}, output in {}",
                p.rows_read,
                p.rows_written,
                p.elapsed.as_secs_f64(),
                p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3) / 1e6,
                p.checkpoints,
                summary
                    .restored_from
                    .map_or_else(|| "the start".to_string(), |c| format!("checkpoint {c}")),
                args.out
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::AlreadyComplete { checkpoint } => {
            println!(
                "already complete: the job in {} finished at checkpoint {checkpoint}; nothing to do",
                args.state
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Cancelled { savepoint, summary } => {
            eprintln!(
                "cancelled at savepoint {savepoint} after {} rows; run the same command to resume",
                summary.progress.rows_read
            );
            Ok(ExitCode::from(3))
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
