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

#[path = "support/fused.rs"]
mod fused;

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
    /// `framework`, or `fused`: the same work as one hand-written loop per
    /// thread, without checkpoints (the benchmarks' limit; local --out only).
    #[arg(long, value_enum, default_value = "framework")]
    engine: Engine,
    /// Write a JSON summary of the run here when it ends.
    #[arg(long)]
    summary_json: Option<std::path::PathBuf>,
    /// Rewrite live progress as JSON here every 20 ms.
    #[arg(long)]
    status_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// The tidewater pipeline, checkpointed.
    Framework,
    /// The hand-fused reference loop.
    Fused,
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

/// Peak resident memory of this process, from /proc (0 where unavailable).
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU seconds (user + system, all threads) this process used so far.
fn cpu_seconds() -> f64 {
    // Fields 14 and 15 of /proc/self/stat, after the command name in parentheses.
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        });
    // Linux reports clock ticks at USER_HZ, 100 on every mainstream configuration.
    ticks.map_or(0.0, |t| t as f64 / 100.0)
}

fn write_json(path: &std::path::Path, value: &serde_json::Value) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(value)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn status_json(p: &ProgressSnapshot) -> serde_json::Value {
    serde_json::json!({
        "rows_read": p.rows_read,
        "rows_total": p.rows_total,
        "checkpoints": p.checkpoints,
        "last_checkpoint": p.last_checkpoint,
        "exposure_rows": p.exposure_rows,
        "elapsed_s": p.elapsed.as_secs_f64(),
        "first_batch_s": p.first_batch_after.map(|d| d.as_secs_f64()),
    })
}

fn summary_json(
    outcome: &str,
    summary: Option<&tidewater::Summary>,
    elapsed: Duration,
    rows: u64,
) -> serde_json::Value {
    let checkpoints: Vec<_> = summary
        .map(|s| {
            s.checkpoints
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c.id,
                        "kind": format!("{:?}", c.kind).to_lowercase(),
                        "duration_s": c.duration.as_secs_f64(),
                        "state_bytes": c.state_bytes,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({
        "outcome": outcome,
        "rows_read_in_run": summary.map_or(rows, |s| s.progress.rows_read - s.rows_restored),
        "rows_restored": summary.map_or(0, |s| s.rows_restored),
        "elapsed_s": elapsed.as_secs_f64(),
        "first_batch_s": summary.and_then(|s| s.progress.first_batch_after).map(|d| d.as_secs_f64()),
        "peak_rss_bytes": peak_rss_bytes(),
        "cpu_s": cpu_seconds(),
        "checkpoints": checkpoints,
    })
}

/// The hand-fused reference: the same work, no framework.
fn run_fused(args: &Args) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let out = std::path::Path::new(&args.out);
    let rows = match args.mode {
        Mode::Copy => {
            let schema = output_schema();
            let transform = move |batch: &RecordBatch| -> Result<RecordBatch> {
                let mask = keep_row(batch)?;
                add_w(arrow::compute::filter_record_batch(batch, &mask)?, &schema)
            };
            fused::copy(
                args.rows,
                args.keys,
                args.parallelism,
                out,
                output_schema(),
                &transform,
            )?
        }
        Mode::Aggregate => fused::aggregate(args.rows, args.keys, args.parallelism, out)?,
    };
    let elapsed = started.elapsed();
    println!(
        "fused: {rows} rows in {:.2}s ({:.2}M rows/s)",
        elapsed.as_secs_f64(),
        rows as f64 / elapsed.as_secs_f64() / 1e6
    );
    if let Some(path) = &args.summary_json {
        write_json(path, &summary_json("completed", None, elapsed, rows))?;
    }
    Ok(ExitCode::SUCCESS)
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
    if let Some(path) = args.status_file.clone() {
        // An OS thread: busy workers delay tokio's timers, and a probe must not lag.
        let control = control.clone();
        std::thread::spawn(move || {
            loop {
                if let Err(e) = write_json(&path, &status_json(&control.progress())) {
                    tracing::warn!("cannot write the status file {}: {e}", path.display());
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
    let started = std::time::Instant::now();
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
    let outcome = outcome?;
    if let Some(path) = &args.summary_json {
        let (name, summary) = match &outcome {
            Outcome::Completed(s) => ("completed", Some(s)),
            Outcome::Cancelled { summary, .. } => ("cancelled", Some(summary)),
            Outcome::AlreadyComplete { .. } => ("already_complete", None),
        };
        write_json(path, &summary_json(name, summary, started.elapsed(), 0))?;
    }
    match outcome {
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
    let result = match args.engine {
        Engine::Framework => runtime.block_on(run(args)),
        Engine::Fused => run_fused(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
