//! The checkpoint-interval benchmark: what an interval costs while the job
//! runs (overhead against no checkpoints) and after a crash (rows redone,
//! seconds until progress resumes), measured on the backfill example.
//!
//! ```text
//! cargo run --release -p tidewater-bench -- interval --mode aggregate --rows 50000000 --keys 1000000
//! ```
//!
//! Every interval runs `--repeat` times, interleaved with the others and with
//! the hand-fused limit (`backfill --engine fused`), so machine noise hits all
//! of them alike; figures are medians. After each round, every interval's wall
//! time and CPU time (user + system, taken with `wait4` from outside the
//! process) are printed as ratios over the same round's `off` run, and at
//! the end the per-round ratios with their medians: `1s over off, per round:
//! wall 1.014, 1.124, ... (median 1.094); cpu ...`. Then each interval is killed (SIGKILL)
//! at `--crashes` random instants and restarted. Results: a table on the
//! terminal, `results.csv`, and `interval.svg` / `interval.png` in `--out-dir`.
//!
//! `tidewater-bench duckdb` runs Parquet → GROUP BY → Parquet on tidewater
//! (with checkpoints) and on DuckDB, side by side: see `duckdb_bench.rs`.
//! `tidewater-bench pg` runs pg_backfill beside the alternatives: `pg_bench.rs`.
//!
//! The runs are the root package's examples (`backfill`, `pg_backfill`),
//! built with this binary's profile when it runs under cargo.

mod duckdb_bench;
mod pg_bench;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;

#[derive(Debug, Parser)]
#[command(about = "Benchmarks of tidewater's checkpointing")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Overhead and rework per checkpoint interval.
    Interval(IntervalArgs),
    /// Parquet → GROUP BY → Parquet, tidewater (checkpointing) beside DuckDB.
    Duckdb(duckdb_bench::DuckdbArgs),
    /// pg_backfill in both sink modes beside a hand loop, raw COPY and a server-side upsert.
    Pg(pg_bench::PgArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Copy,
    Aggregate,
}

#[derive(Debug, clap::Args)]
struct IntervalArgs {
    #[arg(long, value_enum, default_value = "aggregate")]
    mode: Mode,
    #[arg(long, default_value_t = 50_000_000)]
    rows: u64,
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Intervals to compare; `off` is the baseline for overhead.
    #[arg(long, default_value = "off,500ms,1s,5s,10s,30s", value_delimiter = ',')]
    intervals: Vec<String>,
    /// Runs per interval; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Kills per interval, at random instants, to measure rework.
    #[arg(long, default_value_t = 3)]
    crashes: usize,
    /// The recommendation's overhead budget, in percent (`2%` or `2`).
    #[arg(long, default_value = "2%")]
    max_overhead: String,
    /// Where results go.
    #[arg(long, default_value = "bench-results")]
    out_dir: PathBuf,
    /// Scratch space for state and output of the runs (deleted after each).
    #[arg(long)]
    scratch: Option<PathBuf>,
}

/// The example `name` of the root package, built with this binary's profile
/// (in `target/{profile}/examples/`).
fn example_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("binary folder")?;
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("release");
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "tidewater", "--example", name]);
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        if !build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()?
            .success()
        {
            bail!("building the {name} example failed");
        }
    }
    let binary = dir.join("examples").join(name);
    if !binary.exists() {
        bail!(
            "{} is missing: run `cargo build --release --example {name}`",
            binary.display()
        );
    }
    Ok(binary)
}

struct Runner {
    binary: PathBuf,
    args: IntervalArgs,
    scratch: PathBuf,
    counter: u64,
}

/// What one uninterrupted run reported.
#[derive(Debug, Clone)]
struct RunResult {
    rows_per_s: f64,
    /// Seconds from spawn to exit, measured here.
    wall_s: f64,
    /// The process's user + system CPU seconds, from `wait4`: measured from
    /// outside, as a user would, not reported by the job.
    outside_cpu_s: f64,
    /// CPU seconds per million rows: steadier than wall time on a shared machine.
    cpu_per_mrow: f64,
    checkpoint_s: Vec<f64>,
    checkpoint_bytes: Vec<u64>,
    peak_rss: u64,
}

#[derive(Debug, Clone, Default)]
struct CrashResult {
    rework_rows: u64,
    restart_to_progress_s: f64,
}

impl Runner {
    fn fresh_dir(&mut self) -> anyhow::Result<PathBuf> {
        self.counter += 1;
        let dir = self.scratch.join(format!("run-{}", self.counter));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    fn command(&self, dir: &Path, interval: &str, engine: &str) -> Command {
        let a = &self.args;
        let mut command = Command::new(&self.binary);
        command
            .arg("--mode")
            .arg(match a.mode {
                Mode::Copy => "copy",
                Mode::Aggregate => "aggregate",
            })
            .args(["--rows", &a.rows.to_string(), "--keys", &a.keys.to_string()])
            .args(["--parallelism", &a.parallelism.to_string()])
            .args(["--checkpoint-interval", interval, "--engine", engine])
            .arg("--state")
            .arg(dir.join("state"))
            .arg("--out")
            .arg(dir.join("out"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        command
    }

    fn run(&mut self, interval: &str, engine: &str) -> anyhow::Result<RunResult> {
        let dir = self.fresh_dir()?;
        let summary_path = dir.join("summary.json");
        let started = Instant::now();
        let child = self
            .command(&dir, interval, engine)
            .arg("--summary-json")
            .arg(&summary_path)
            .spawn()?;
        let (exited_ok, outside_cpu_s) = wait_with_cpu(child)?;
        let wall_s = started.elapsed().as_secs_f64();
        if !exited_ok {
            bail!("backfill ({interval}, {engine}) failed");
        }
        let summary: Value = serde_json::from_slice(&std::fs::read(&summary_path)?)?;
        let _ = std::fs::remove_dir_all(&dir);
        let periodic: Vec<&Value> = summary["checkpoints"]
            .as_array()
            .map(|a| a.iter().filter(|c| c["kind"] == "periodic").collect())
            .unwrap_or_default();
        let rows = summary["rows_read_in_run"].as_f64().unwrap_or(0.0);
        Ok(RunResult {
            rows_per_s: rows / summary["elapsed_s"].as_f64().unwrap_or(f64::NAN),
            wall_s,
            outside_cpu_s,
            cpu_per_mrow: summary["cpu_s"].as_f64().unwrap_or(f64::NAN) / (rows / 1e6),
            checkpoint_s: periodic
                .iter()
                .filter_map(|c| c["duration_s"].as_f64())
                .collect(),
            checkpoint_bytes: periodic
                .iter()
                .filter_map(|c| c["state_bytes"].as_u64())
                .collect(),
            peak_rss: summary["peak_rss_bytes"].as_u64().unwrap_or(0),
        })
    }

    /// Runs until `at`, kills -9, restarts, and measures until progress resumes.
    fn crash(&mut self, interval: &str, at: Duration) -> anyhow::Result<Option<CrashResult>> {
        let dir = self.fresh_dir()?;
        let status_path = dir.join("status.json");
        let mut child = self
            .command(&dir, interval, "framework")
            .arg("--status-file")
            .arg(&status_path)
            .stderr(Stdio::null())
            .spawn()?;
        let started = Instant::now();
        while started.elapsed() < at {
            if child.try_wait()?.is_some() {
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(None); // finished before the kill: not a crash sample
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let before: Value = read_status(&status_path).unwrap_or(Value::Null);
        child.kill()?;
        child.wait()?;
        let rework_rows = before["exposure_rows"].as_u64().unwrap_or(0);

        let restart_status = dir.join("status-restart.json");
        let mut restart = self
            .command(&dir, interval, "framework")
            .arg("--status-file")
            .arg(&restart_status)
            .stderr(Stdio::null())
            .spawn()?;
        let restarted = Instant::now();
        // Wall time from the restart to the first new batch, as a user sees it
        // (process start and restore included; granularity ~25 ms).
        let restart_to_progress_s = loop {
            if read_status(&restart_status).is_some_and(|s| s["first_batch_s"].is_number()) {
                break restarted.elapsed().as_secs_f64();
            }
            if restart.try_wait()?.is_some() || restarted.elapsed() > Duration::from_secs(120) {
                break restarted.elapsed().as_secs_f64();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = restart.kill();
        let _ = restart.wait();
        let _ = std::fs::remove_dir_all(&dir);
        Ok(Some(CrashResult {
            rework_rows,
            restart_to_progress_s,
        }))
    }
}

fn read_status(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn interval_seconds(text: &str) -> anyhow::Result<Option<f64>> {
    if text == "off" {
        return Ok(None);
    }
    Ok(Some(
        humantime::parse_duration(text)
            .with_context(|| format!("interval '{text}'"))?
            .as_secs_f64(),
    ))
}

/// Waits for `child` with `wait4`: whether it exited with 0, and its user +
/// system CPU seconds (children it waited for included).
fn wait_with_cpu(child: std::process::Child) -> anyhow::Result<(bool, f64)> {
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; zeroed is a valid value for it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (std only waits when
    // asked); the pointers are to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        bail!("wait4 on {pid}: {}", std::io::Error::last_os_error());
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok((ok, seconds(usage.ru_utime) + seconds(usage.ru_stime)))
}

/// Each interval's wall and CPU time over the same round's `off` run, per
/// round: the ratios quoted in docs/benchmarks.md (a round's runs are
/// minutes apart, so the machine's load changes less between them than
/// across rounds).
fn round_ratios(off: &RunResult, run: &RunResult) -> (f64, f64) {
    (
        run.wall_s / off.wall_s,
        run.outside_cpu_s / off.outside_cpu_s,
    )
}

/// One line of the report.
#[derive(Debug, Clone)]
struct Row {
    interval: String,
    seconds: Option<f64>,
    rows_per_s: f64,
    overhead_pct: f64,
    cpu_overhead_pct: f64,
    of_limit: f64,
    checkpoint_p50_ms: f64,
    checkpoint_p99_ms: f64,
    bytes_per_checkpoint: f64,
    rework_mean: f64,
    rework_max: f64,
    rework_intervals: f64,
    restart_s: f64,
    peak_rss_mib: f64,
}

/// Where the framework's `off` run is among the configurations.
fn off_position(configs: &[(String, &str)]) -> usize {
    configs
        .iter()
        .position(|(interval, engine)| interval == "off" && *engine == "framework")
        .expect("--intervals includes off (checked)")
}

fn interval_bench(args: IntervalArgs) -> anyhow::Result<()> {
    let max_overhead: f64 = args
        .max_overhead
        .trim_end_matches('%')
        .parse()
        .context("--max-overhead")?;
    if !args.intervals.iter().any(|i| i == "off") {
        bail!("--intervals must include `off`: it is the baseline for overhead");
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let scratch = args
        .scratch
        .clone()
        .unwrap_or_else(|| args.out_dir.join("scratch"));
    let mut runner = Runner {
        binary: example_binary("backfill")?,
        scratch,
        counter: 0,
        args,
    };
    let intervals = runner.args.intervals.clone();
    let (total_rows, repeat, crashes) = (
        runner.args.rows,
        runner.args.repeat.max(1),
        runner.args.crashes,
    );
    let mut configs: Vec<(String, &str)> =
        intervals.iter().map(|i| (i.clone(), "framework")).collect();
    configs.push(("off".into(), "fused"));

    // Throughput: every configuration once per round, the order rotated per round.
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); configs.len()];
    for round in 0..repeat {
        for n in 0..configs.len() {
            let index = (n + round) % configs.len();
            let (interval, engine) = configs[index].clone();
            let result = runner.run(&interval, engine)?;
            eprintln!(
                "round {}/{repeat}: {engine:9} {interval:>6}: {:.2}M rows/s, peak {} MiB",
                round + 1,
                result.rows_per_s / 1e6,
                result.peak_rss >> 20
            );
            results[index].push(result);
        }
        let off = results[off_position(&configs)].last().cloned();
        if let Some(off) = off {
            for (index, (interval, engine)) in configs.iter().enumerate() {
                if *engine != "framework" || interval == "off" {
                    continue;
                }
                if let Some(run) = results[index].last() {
                    let (wall, cpu) = round_ratios(&off, run);
                    eprintln!(
                        "round {}/{repeat}: {interval:>6} over off: wall {wall:.3}, cpu {cpu:.3}",
                        round + 1
                    );
                }
            }
        }
    }
    // Per-round ratios, then their medians.
    let off_runs = results[off_position(&configs)].clone();
    for (index, (interval, engine)) in configs.iter().enumerate() {
        if *engine != "framework" || interval == "off" {
            continue;
        }
        let (walls, cpus): (Vec<f64>, Vec<f64>) = off_runs
            .iter()
            .zip(&results[index])
            .map(|(off, run)| round_ratios(off, run))
            .unzip();
        let list = |v: &[f64]| {
            v.iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        eprintln!(
            "{interval:>6} over off, per round: wall {} (median {:.3}); cpu {} (median {:.3})",
            list(&walls),
            median(&mut walls.clone()),
            list(&cpus),
            median(&mut cpus.clone())
        );
    }
    let limit = median(
        &mut results[configs.len() - 1]
            .iter()
            .map(|r| r.rows_per_s)
            .collect::<Vec<_>>(),
    );
    let off_index = intervals
        .iter()
        .position(|i| i == "off")
        .expect("checked above");
    let cpu_baseline = median(
        &mut results[off_index]
            .iter()
            .map(|r| r.cpu_per_mrow)
            .collect::<Vec<_>>(),
    );
    let baseline = median(
        &mut results[off_index]
            .iter()
            .map(|r| r.rows_per_s)
            .collect::<Vec<_>>(),
    );

    let mut rows = Vec::new();
    for (index, interval) in intervals.iter().enumerate() {
        let runs = &results[index];
        let rate = median(&mut runs.iter().map(|r| r.rows_per_s).collect::<Vec<_>>());
        let durations: Vec<f64> = runs.iter().flat_map(|r| r.checkpoint_s.clone()).collect();
        let bytes: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.checkpoint_bytes.iter().map(|b| *b as f64))
            .collect();
        let seconds = interval_seconds(interval)?;
        let mut crash_results = Vec::new();
        if seconds.is_some() {
            let run_time = total_rows as f64 / rate;
            let mut attempts = 0;
            while crash_results.len() < crashes && attempts < crashes * 3 {
                attempts += 1;
                // Uniform over the run, after start-up and before the end.
                let fraction = 0.2
                    + 0.7
                        * (tidewater_core::splitmix64(attempts as u64 + index as u64 * 1000) % 1000)
                            as f64
                        / 1000.0;
                let at = Duration::from_secs_f64(run_time * fraction);
                if let Some(result) = runner.crash(interval, at)? {
                    eprintln!(
                        "crash {interval:>6} at {:.1}s: {} rows redone, progress again after {:.3}s",
                        at.as_secs_f64(),
                        result.rework_rows,
                        result.restart_to_progress_s
                    );
                    crash_results.push(result);
                }
            }
        }
        let rework: Vec<f64> = crash_results.iter().map(|c| c.rework_rows as f64).collect();
        let restart: Vec<f64> = crash_results
            .iter()
            .map(|c| c.restart_to_progress_s)
            .collect();
        // No crashes, no rework figure: NaN, not a mean of nothing.
        let rework_mean = if rework.is_empty() {
            f64::NAN
        } else {
            rework.iter().sum::<f64>() / rework.len() as f64
        };
        rows.push(Row {
            interval: interval.clone(),
            seconds,
            rows_per_s: rate,
            overhead_pct: (baseline / rate - 1.0) * 100.0,
            cpu_overhead_pct: (median(
                &mut runs.iter().map(|r| r.cpu_per_mrow).collect::<Vec<_>>(),
            ) / cpu_baseline
                - 1.0)
                * 100.0,
            of_limit: rate / limit,
            checkpoint_p50_ms: percentile(&durations, 0.5) * 1e3,
            checkpoint_p99_ms: percentile(&durations, 0.99) * 1e3,
            bytes_per_checkpoint: if bytes.is_empty() {
                f64::NAN
            } else {
                bytes.iter().sum::<f64>() / bytes.len() as f64
            },
            rework_mean,
            rework_max: rework.iter().copied().fold(f64::NAN, f64::max),
            rework_intervals: seconds.map_or(f64::NAN, |s| rework_mean / (rate * s)),
            restart_s: if restart.is_empty() {
                f64::NAN
            } else {
                restart.iter().sum::<f64>() / restart.len() as f64
            },
            peak_rss_mib: runs.iter().map(|r| r.peak_rss).max().unwrap_or(0) as f64
                / (1024.0 * 1024.0),
        });
    }
    report(&runner.args, &rows, limit, max_overhead)?;
    let _ = std::fs::remove_dir_all(&runner.scratch);
    Ok(())
}

fn report(args: &IntervalArgs, rows: &[Row], limit: f64, max_overhead: f64) -> anyhow::Result<()> {
    println!(
        "\n{:?} mode, {} rows, {} keys, parallelism {}; limit (hand-fused): {:.2}M rows/s; medians of {} runs, {} crashes per interval\n",
        args.mode,
        args.rows,
        args.keys,
        args.parallelism,
        limit / 1e6,
        args.repeat,
        args.crashes
    );
    println!(
        "{:>8} {:>11} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11} {:>12} {:>12} {:>10} {:>10} {:>9}",
        "interval",
        "Mrows/s",
        "overhead",
        "cpu ovh",
        "of limit",
        "ckpt p50",
        "ckpt p99",
        "MB/ckpt",
        "rework mean",
        "rework max",
        "rework/iv",
        "restart s",
        "peak MiB"
    );
    let mut csv = String::from(
        "interval,seconds,rows_per_s,overhead_pct,cpu_overhead_pct,of_limit,checkpoint_p50_ms,checkpoint_p99_ms,bytes_per_checkpoint,rework_rows_mean,rework_rows_max,rework_intervals_mean,restart_to_progress_s,peak_rss_mib\n",
    );
    for r in rows {
        println!(
            "{:>8} {:>11.2} {:>8.2}% {:>8.2}% {:>8.2} {:>7.0}ms {:>7.0}ms {:>11.2} {:>12.0} {:>12.0} {:>10.2} {:>10.3} {:>9.0}",
            r.interval,
            r.rows_per_s / 1e6,
            r.overhead_pct,
            r.cpu_overhead_pct,
            r.of_limit,
            r.checkpoint_p50_ms,
            r.checkpoint_p99_ms,
            r.bytes_per_checkpoint / 1e6,
            r.rework_mean,
            r.rework_max,
            r.rework_intervals,
            r.restart_s,
            r.peak_rss_mib
        );
        csv.push_str(&format!(
            "{},{},{:.0},{:.3},{:.3},{:.3},{:.1},{:.1},{:.0},{:.0},{:.0},{:.3},{:.3},{:.1}\n",
            r.interval,
            r.seconds.map_or(String::new(), |s| s.to_string()),
            r.rows_per_s,
            r.overhead_pct,
            r.cpu_overhead_pct,
            r.of_limit,
            r.checkpoint_p50_ms,
            r.checkpoint_p99_ms,
            r.bytes_per_checkpoint,
            r.rework_mean,
            r.rework_max,
            r.rework_intervals,
            r.restart_s,
            r.peak_rss_mib
        ));
    }
    std::fs::write(args.out_dir.join("results.csv"), csv)?;
    let recommended = rows
        .iter()
        .filter(|r| r.seconds.is_some() && r.overhead_pct <= max_overhead)
        .min_by(|a, b| a.seconds.partial_cmp(&b.seconds).expect("finite"));
    match recommended {
        Some(r) if r.rework_mean.is_nan() => println!(
            "\nrecommendation: --checkpoint-interval {} (overhead {:.2}% <= {max_overhead}%); run with --crashes K to measure what a crash redoes",
            r.interval, r.overhead_pct,
        ),
        Some(r) => println!(
            "\nrecommendation: --checkpoint-interval {} (overhead {:.2}% <= {max_overhead}%); a crash redoes {:.0} rows on average ({:.2} s of work)",
            r.interval,
            r.overhead_pct,
            r.rework_mean,
            r.rework_mean / r.rows_per_s
        ),
        None if !rows.iter().any(|r| r.seconds.is_some()) => println!(
            "\nrecommendation: none; --intervals named no checkpoint interval to compare with off"
        ),
        None => println!(
            "\nrecommendation: no interval stayed under {max_overhead}% overhead; try longer intervals"
        ),
    }
    plot(args, rows)?;
    println!(
        "wrote {}/results.csv, interval.svg, interval.png",
        args.out_dir.display()
    );
    Ok(())
}

fn plot(args: &IntervalArgs, rows: &[Row]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let points: Vec<&Row> = rows.iter().filter(|r| r.seconds.is_some()).collect();
    if points.is_empty() {
        return Ok(());
    }
    if let Ok(font) = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf") {
        let font: &'static [u8] = Box::leak(font.into_boxed_slice());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, font);
    }
    let title = format!(
        "{:?}, {}M rows, {} keys, p={}: overhead and rework by checkpoint interval",
        args.mode,
        args.rows / 1_000_000,
        args.keys,
        args.parallelism
    );
    let x_max = points.iter().filter_map(|r| r.seconds).fold(0.0, f64::max) * 1.5;
    let x_min = points
        .iter()
        .filter_map(|r| r.seconds)
        .fold(f64::MAX, f64::min)
        / 1.5;
    let y_max = points.iter().map(|r| r.overhead_pct).fold(1.0, f64::max) * 1.2;
    let y_min = points.iter().map(|r| r.overhead_pct).fold(0.0, f64::min) * 1.2;
    // Millions of rows: raw row counts make labels wider than their axis.
    let rework_max = points
        .iter()
        .map(|r| r.rework_mean / 1e6)
        .filter(|v| v.is_finite())
        .fold(0.001, f64::max)
        * 1.2;

    fn draw<DB: DrawingBackend>(
        root: DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
        points: &[&Row],
        x: (f64, f64),
        y: (f64, f64),
        rework_max: f64,
    ) -> anyhow::Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .right_y_label_area_size(70)
            .build_cartesian_2d((x.0..x.1).log_scale(), y.0..y.1)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .set_secondary_coord((x.0..x.1).log_scale(), 0.0..rework_max);
        chart
            .configure_mesh()
            .x_labels(6)
            .x_label_formatter(&|s| format!("{}s", (s * 1000.0).round() / 1000.0))
            .y_label_formatter(&|p| format!("{p:.1}%"))
            .light_line_style(RGBColor(238, 238, 238))
            .x_desc("checkpoint interval (log scale)")
            .y_desc("throughput overhead vs off")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        chart
            .configure_secondary_axes()
            .y_label_formatter(&|m| format!("{m:.0}M"))
            .y_desc("rows redone per crash (mean)")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let overhead: Vec<(f64, f64)> = points
            .iter()
            .map(|r| (r.seconds.unwrap_or(0.0), r.overhead_pct))
            .collect();
        chart
            .draw_series(LineSeries::new(overhead.clone(), BLUE.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label("overhead %")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart
            .draw_series(overhead.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let rework: Vec<(f64, f64)> = points
            .iter()
            .filter(|r| r.rework_mean.is_finite())
            .map(|r| (r.seconds.unwrap_or(0.0), r.rework_mean / 1e6))
            .collect();
        chart
            .draw_secondary_series(LineSeries::new(rework.clone(), RED.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label("rows redone per crash")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart
            .draw_secondary_series(rework.iter().map(|p| Circle::new(*p, 4, RED.filled())))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok(())
    }

    let svg = args.out_dir.join("interval.svg");
    draw(
        SVGBackend::new(&svg, (900, 520)).into_drawing_area(),
        &title,
        &points,
        (x_min, x_max),
        (y_min, y_max),
        rework_max,
    )?;
    let png = args.out_dir.join("interval.png");
    draw(
        BitMapBackend::new(&png, (900, 520)).into_drawing_area(),
        &title,
        &points,
        (x_min, x_max),
        (y_min, y_max),
        rework_max,
    )?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Bench::Interval(args) => interval_bench(args),
        Bench::Duckdb(args) => duckdb_bench::duckdb_bench(args),
        Bench::Pg(args) => pg_bench::pg_bench(args),
    }
}

#[cfg(test)]
mod round_ratio_tests {
    use super::*;

    fn run(wall_s: f64, outside_cpu_s: f64) -> RunResult {
        RunResult {
            rows_per_s: 0.0,
            wall_s,
            outside_cpu_s,
            cpu_per_mrow: 0.0,
            checkpoint_s: Vec::new(),
            checkpoint_bytes: Vec::new(),
            peak_rss: 0,
        }
    }

    #[test]
    fn ratios_are_over_the_same_rounds_off_run() {
        let cases = [
            ((20.0, 30.0), (21.0, 31.5), (1.05, 1.05)),
            ((20.0, 30.0), (19.0, 33.0), (0.95, 1.1)),
        ];
        for ((off_wall, off_cpu), (wall, cpu), (want_wall, want_cpu)) in cases {
            let (w, c) = round_ratios(&run(off_wall, off_cpu), &run(wall, cpu));
            assert!(
                (w - want_wall).abs() < 1e-9 && (c - want_cpu).abs() < 1e-9,
                "{w} {c}"
            );
        }
    }
}
