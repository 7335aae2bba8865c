//! `tidewater-bench duckdb`: tidewater against the engine users would otherwise reach
//! for, on the same Parquet file in the same run.
//!
//! tidewater: ParquetSource(id, k, v) → key_by(k) → count, sum(v), max(id) →
//! ParquetSink, checkpointing every `--interval`. DuckDB (Python package,
//! `--duckdb-threads` threads): `COPY (SELECT k, count(*), sum(v), max(id)
//! FROM 'file' GROUP BY k) TO 'out.parquet'`, with no checkpoints. The two
//! alternate, `--repeat` times each; medians and their ratio are reported, and
//! the outputs are checked against each other.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::median;
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use tidewater_core::{AggregateSpec, GeneratorSource, JobConfig, Outcome, Pipeline};
use tidewater_parquet::{ParquetSink, ParquetSource};

#[derive(Debug, clap::Args)]
pub struct DuckdbArgs {
    /// Rows in the input file.
    #[arg(long, default_value_t = 50_000_000)]
    rows: u64,
    /// Distinct keys k.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// tidewater's subtasks per operator.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// DuckDB's threads.
    #[arg(long, default_value_t = 2)]
    duckdb_threads: usize,
    /// tidewater's checkpoint interval.
    #[arg(long, default_value = "1s")]
    interval: humantime::Duration,
    /// Runs of each engine; medians are reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// The input file (made when missing: zstd, 1M-row row groups; default
    /// `{out-dir}/input-{rows}-{keys}.parquet`).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Where results go.
    #[arg(long, default_value = "bench-results/duckdb")]
    out_dir: PathBuf,
}

const DUCKDB: &str = r#"
import json, sys, time
import duckdb
src, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = duckdb.connect()
con.execute(f"SET threads = {threads}")
con.execute("SET enable_progress_bar = false")
started = time.perf_counter()
con.execute(f"COPY (SELECT k, count(*) AS count, sum(v) AS sum_v, max(id) AS max_id "
            f"FROM '{src}' GROUP BY k) TO '{out}' (FORMAT parquet)")
print(json.dumps({"seconds": time.perf_counter() - started}))
"#;

/// Writes the input: the generator's rows (id, k, v, s) in 1M-row row groups.
fn make_input(path: &Path, rows: u64, keys: u64) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let generator = GeneratorSource::new(rows, keys);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(1_000_000))
        .build();
    let partial = path.with_extension("parquet.partial");
    let mut writer =
        ArrowWriter::try_new(File::create(&partial)?, generator.schema_ref(), Some(props))?;
    let step = 65_536;
    let mut start = 0;
    while start < rows {
        let end = (start + step).min(rows);
        writer.write(&generator.batch(start, end)?)?;
        start = end;
    }
    writer.close()?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

/// (groups, total count, total sum, max of max_id) of an aggregate output.
fn digest(files: &[PathBuf]) -> anyhow::Result<(u64, i64, f64, i64)> {
    let (mut groups, mut count, mut sum, mut max) = (0u64, 0i64, 0f64, i64::MIN);
    for file in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(file)?)?.build()?;
        for batch in reader {
            let batch: RecordBatch = batch?;
            groups += batch.num_rows() as u64;
            let counts = batch.column_by_name("count").context("no count column")?;
            count += match counts.data_type() {
                arrow::datatypes::DataType::Int64 => counts
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .sum::<i64>(),
                _ => arrow::compute::cast(counts, &arrow::datatypes::DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .sum(),
            };
            sum += batch
                .column_by_name("sum_v")
                .context("no sum_v column")?
                .as_primitive::<Float64Type>()
                .values()
                .iter()
                .sum::<f64>();
            max = max.max(
                batch
                    .column_by_name("max_id")
                    .context("no max_id column")?
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(i64::MIN),
            );
        }
    }
    Ok((groups, count, sum, max))
}

fn parquet_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    Ok(files)
}

struct TidewaterRun {
    seconds: f64,
    checkpoints: usize,
}

async fn run_tidewater(args: &DuckdbArgs, scratch: &Path) -> anyhow::Result<TidewaterRun> {
    let out = scratch.join("tidewater-out");
    let state = scratch.join("tidewater-state");
    let started = Instant::now();
    let input = args.input.as_ref().context("no input")?;
    let source = ParquetSource::builder(input.to_string_lossy())
        .columns(["id", "k", "v"])
        .build()
        .await?;
    let pipeline = Pipeline::new("duckdb-bench").with_parallelism(args.parallelism);
    pipeline
        .source("input", source)
        .key_by(["k"])
        .aggregate(
            "aggregate",
            AggregateSpec::new()
                .count("count")
                .sum("v", "sum_v")
                .max("id", "max_id"),
        )
        .sink("out", ParquetSink::open(&out.to_string_lossy())?);
    let config = JobConfig::new(&state.to_string_lossy())?
        .checkpoint_interval(Some(*args.interval.as_ref()));
    let outcome = pipeline.build()?.run(config).await?;
    let seconds = started.elapsed().as_secs_f64();
    let Outcome::Completed(summary) = outcome else {
        bail!("the tidewater run did not complete: {outcome:?}");
    };
    Ok(TidewaterRun {
        seconds,
        checkpoints: summary.checkpoints.len(),
    })
}

fn run_duckdb(args: &DuckdbArgs, scratch: &Path) -> anyhow::Result<(f64, f64)> {
    let out = scratch.join("duckdb-out.parquet");
    let started = Instant::now();
    let output = Command::new("python3")
        .args(["-c", DUCKDB])
        .arg(args.input.as_ref().context("no input")?)
        .arg(&out)
        .arg(args.duckdb_threads.to_string())
        .output()
        .context("running python3 (install the duckdb package: pip install duckdb)")?;
    let wall = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!(
            "DuckDB failed (is the duckdb package installed? pip install duckdb):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let reported: serde_json::Value = serde_json::from_str(last)
        .with_context(|| format!("DuckDB's script printed {stdout:?}"))?;
    let query = reported["seconds"]
        .as_f64()
        .context("DuckDB reported no time")?;
    Ok((query, wall))
}

pub fn duckdb_bench(mut args: DuckdbArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out_dir)?;
    let input = args.input.take().unwrap_or_else(|| {
        args.out_dir
            .join(format!("input-{}-{}.parquet", args.rows, args.keys))
    });
    args.input = Some(input.clone());
    if !input.exists() {
        eprintln!(
            "writing the input: {} rows to {}",
            args.rows,
            input.display()
        );
        make_input(&input, args.rows, args.keys)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (mut ours, mut theirs, mut theirs_wall) = (Vec::new(), Vec::new(), Vec::new());
    let mut checkpoints = Vec::new();
    let (mut ours_digest, mut their_digest) = (None, None);
    let mut csv = String::from("run,engine,seconds,checkpoints\n");
    for r in 0..args.repeat {
        // Alternate who goes first: the machine's load drifts.
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for tidewater_turn in order {
            let scratch = tempfile::tempdir_in(&args.out_dir)?;
            if tidewater_turn {
                let run = runtime.block_on(run_tidewater(&args, scratch.path()))?;
                eprintln!(
                    "run {r}: tidewater {:.2}s ({} checkpoints)",
                    run.seconds, run.checkpoints
                );
                csv += &format!("{r},tidewater,{:.3},{}\n", run.seconds, run.checkpoints);
                ours_digest = Some(digest(&parquet_files(
                    &scratch.path().join("tidewater-out"),
                )?)?);
                ours.push(run.seconds);
                checkpoints.push(run.checkpoints as f64);
            } else {
                let (query, wall) = run_duckdb(&args, scratch.path())?;
                eprintln!(
                    "run {r}: duckdb {query:.2}s in the query, {wall:.2}s with python start-up"
                );
                csv += &format!("{r},duckdb,{query:.3},0\n");
                their_digest = Some(digest(&[scratch.path().join("duckdb-out.parquet")])?);
                theirs.push(query);
                theirs_wall.push(wall);
            }
        }
    }
    // Same groups, counts and max; sums equal up to float rounding.
    let (Some(a), Some(b)) = (ours_digest, their_digest) else {
        bail!("--repeat must be at least 1");
    };
    if (a.0, a.1, a.3) != (b.0, b.1, b.3) || (a.2 - b.2).abs() > 1e-6 * b.2.abs().max(1.0) {
        bail!("the outputs differ: tidewater {a:?}, DuckDB {b:?}");
    }
    std::fs::write(args.out_dir.join("duckdb.csv"), csv)?;
    let (t, d, dw) = (
        median(&mut ours),
        median(&mut theirs),
        median(&mut theirs_wall),
    );
    let rate = |s: f64| args.rows as f64 / s / 1e6;
    println!(
        "| {}M rows, {} keys | tidewater p{} @ {} ({} checkpoints) | DuckDB {} threads | ratio |",
        args.rows / 1_000_000,
        args.keys,
        args.parallelism,
        args.interval,
        median(&mut checkpoints),
        args.duckdb_threads
    );
    println!("|---|---|---|---|");
    println!(
        "| median of {} | {t:.2} s ({:.1}M rows/s) | {d:.2} s ({:.1}M rows/s); {dw:.2} s with start-up | tidewater/DuckDB time {:.2} |",
        args.repeat,
        rate(t),
        rate(d),
        t / d
    );
    println!("outputs agree (groups, count, sum_v, max_id): {a:?}");
    Ok(())
}
