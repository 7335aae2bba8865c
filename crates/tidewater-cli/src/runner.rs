//! What every program that runs a job does around it: parse an interval,
//! show progress, turn SIGINT/SIGTERM into a savepoint, write the status and
//! summary files the benchmarks read, and map the outcome to an exit code
//! (0 complete, 1 failed, 3 cancelled and resumable).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidewater_core::checkpoint::incremental::DEFAULT_FULL_EVERY;
use tidewater_core::events::InternalEvent;
use tidewater_core::{Job, JobConfig, JobControl, Outcome, ProgressSnapshot, Summary};

/// A checkpoint interval flag; `None` is `off`.
#[derive(Debug, Clone, Copy)]
pub struct Interval(pub Option<Duration>);

/// Parses `500ms`, `1s`, `10s` or `off`.
pub fn parse_interval(text: &str) -> Result<Interval, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Interval(None));
    }
    let interval = humantime::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a duration like 500ms, 1s or 10s, nor 'off': {e}"))?;
    if interval.is_zero() {
        return Err("a duration of zero means nothing here: give one above zero, or 'off'".into());
    }
    Ok(Interval(Some(interval)))
}

/// Parses a duration that must be above zero, `off` not allowed (a poll
/// interval, a timeout).
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_interval(text)? {
        Interval(Some(duration)) => Ok(duration),
        Interval(None) => Err(format!(
            "'{text}' cannot be turned off: give a duration above zero, like 1s"
        )),
    }
}

/// Parses a size such as `128MiB`, `64 MB` or `1048576` into bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("'{text}' is not a size like 128MiB, 64MB or 1048576: {e}"))?;
    if size.as_u64() == 0 {
        return Err("the size must be above zero".into());
    }
    Ok(size.as_u64())
}

/// Parses a count that must be at least 1 (subtasks, keys, rows per batch).
pub fn parse_at_least_one(text: &str) -> Result<u64, String> {
    let n: u64 = text
        .parse()
        .map_err(|e| format!("'{text}' is not a whole number: {e}"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// Parses a count that must be at least 1, as a `usize`.
pub fn parse_usize_at_least_one(text: &str) -> Result<usize, String> {
    let n = parse_at_least_one(text)?;
    usize::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// The flags every runner has: when to checkpoint, how wide, where state and
/// reports go.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Time between checkpoints (e.g. 500ms, 1s, 10s), or `off`.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub checkpoint_interval: Interval,
    /// Subtasks per operator.
    #[arg(long, default_value_t = 2, value_parser = parse_usize_at_least_one)]
    pub parallelism: usize,
    /// Where checkpoints go: a folder or URL.
    #[arg(long, default_value = "./tidewater-state")]
    pub state: String,
    /// Completed checkpoints to keep (at least 1).
    #[arg(long, default_value_t = 3, value_parser = parse_usize_at_least_one)]
    pub retain: usize,
    /// Write a JSON summary of the run here when it ends.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Rewrite live progress as JSON here every 20 ms.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// Incremental checkpoints: keyed state writes only the keys changed
    /// since the previous checkpoint, on top of a periodic full one.
    #[arg(long)]
    pub incremental: bool,
    /// With --incremental, a full checkpoint at least every this many
    /// checkpoints that found changes (at most N-1 deltas after a base).
    #[arg(long, default_value_t = DEFAULT_FULL_EVERY, value_parser = clap::value_parser!(u32).range(1..))]
    pub full_checkpoint_every: u32,
}

impl RunArgs {
    /// The job configuration these flags ask for.
    pub fn config(&self) -> anyhow::Result<JobConfig> {
        Ok(JobConfig::new(&self.state)
            .with_context(|| format!("opening --state {}", self.state))?
            .checkpoint_interval(self.checkpoint_interval.0)
            .retain(self.retain)
            .incremental_checkpoints(self.incremental)
            .full_checkpoint_every(self.full_checkpoint_every))
    }

    /// Where the run reports; `out` names the output in messages.
    pub fn reporting(&self, out: &str) -> Reporting {
        Reporting {
            summary_json: self.summary_json.clone(),
            status_file: self.status_file.clone(),
            state: self.state.clone(),
            out: out.to_string(),
            progress: ProgressMode::Auto,
            progress_interval: Some(Duration::from_secs(10)),
        }
    }
}

/// Logs to stderr, `RUST_LOG` or `info`; a line never tears a progress bar.
pub fn init_logging() {
    init_logging_for(ProgressMode::Auto);
}

/// Logs to stderr for a run showing progress as `mode` says: with `json`
/// progress, logs are JSON too, so that stderr stays machine-readable.
pub fn init_logging_for(mode: ProgressMode) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(|| crate::progress::BarSafeStderr);
    // A second init (tests calling twice) keeps the first subscriber.
    let _ = match mode {
        ProgressMode::Json => builder.json().try_init(),
        _ => builder.try_init(),
    };
}

/// Where the run reports, besides the terminal.
#[derive(Debug, Clone, Default)]
pub struct Reporting {
    /// Written when the run ends.
    pub summary_json: Option<PathBuf>,
    /// Rewritten every 20 ms.
    pub status_file: Option<PathBuf>,
    /// For messages.
    pub state: String,
    /// For messages.
    pub out: String,
    /// How progress is shown.
    pub progress: ProgressMode,
    /// Time between progress lines (`plain` and `json`).
    pub progress_interval: Option<Duration>,
}

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    #[default]
    Auto,
    /// A live bar.
    Bar,
    /// A line of text every interval (through the log).
    Plain,
    /// A JSON object per line on stderr every interval.
    Json,
    /// Nothing but the final line.
    Off,
}

impl ProgressMode {
    /// What `Auto` means here.
    pub fn resolved(self) -> ProgressMode {
        match self {
            ProgressMode::Auto if std::io::stderr().is_terminal() => ProgressMode::Bar,
            ProgressMode::Auto => ProgressMode::Plain,
            other => other,
        }
    }
}

/// Peak resident memory of this process, from /proc (0 where unavailable).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// CPU seconds (user + system, all threads) this process used so far.
pub fn cpu_seconds() -> f64 {
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

/// Writes JSON atomically (write, then rename).
pub fn write_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
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
        "throttled_s": p.throttled.as_secs_f64(),
        "throttled_sources": p.throttled_sources,
    })
}

/// The summary file the benchmarks read.
pub fn summary_json(
    outcome: &str,
    summary: Option<&Summary>,
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
                        "phases_ms": {
                            "align": c.phases.align.as_secs_f64() * 1e3,
                            "snapshot": c.phases.snapshot.as_secs_f64() * 1e3,
                            "upload": c.phases.upload.as_secs_f64() * 1e3,
                            "manifest": c.phases.manifest.as_secs_f64() * 1e3,
                            "commit": c.phases.commit.as_secs_f64() * 1e3,
                        },
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({
        "outcome": outcome,
        "rows_read_in_run": summary.map_or(rows, |s| s.progress.rows_read - s.rows_restored),
        "rows_restored": summary.map_or(0, |s| s.rows_restored),
        "rows_written_in_run": summary.map_or(0, |s| s.progress.rows_written),
        "elapsed_s": elapsed.as_secs_f64(),
        "first_batch_s": summary.and_then(|s| s.progress.first_batch_after).map(|d| d.as_secs_f64()),
        "peak_rss_bytes": peak_rss_bytes(),
        "cpu_s": cpu_seconds(),
        "checkpoints": checkpoints,
        "fallbacks": summary.map(|s| {
            s.fallbacks
                .iter()
                .map(|(id, why)| serde_json::json!({ "checkpoint": id.0, "reason": why }))
                .collect::<Vec<_>>()
        }).unwrap_or_default(),
    })
}

/// The progress line: rows, rate, checkpoints, and what a crash now would redo.
pub fn progress_line(p: &ProgressSnapshot) -> String {
    let rate = p.rows_read as f64 / p.elapsed.as_secs_f64().max(1e-3);
    let throttled = match (p.throttled_sources, p.throttled.as_secs_f64()) {
        (0, s) if s < 0.1 => String::new(),
        (0, s) => format!(", throttled {s:.1} s"),
        (n, s) => format!(", throttled {s:.1} s ({n} sources waiting now)"),
    };
    format!(
        "{}/{} rows, {:.2}M rows/s, {} checkpoints (last #{}, {} ms), {} rows since{throttled}",
        p.rows_read,
        p.rows_total,
        rate / 1e6,
        p.checkpoints,
        p.last_checkpoint,
        p.last_checkpoint_duration.as_millis(),
        p.exposure_rows
    )
}

/// What a caller of [`run_job_with`] does when the job starts and ends
/// (the `tidewater` command keeps the job store's record and lease).
pub trait RunHooks {
    /// The job started: `control` reads its progress and cancels it.
    fn started(&mut self, _control: &JobControl) {}

    /// The job ended so, before the outcome is reported.
    fn ended(&mut self, _outcome: &tidewater_core::Result<Outcome>, _last: &ProgressSnapshot) {}
}

/// No hooks.
pub struct NoHooks;

impl RunHooks for NoHooks {}

/// Runs `job` to its end, reporting as it goes; maps the outcome to an exit code.
pub async fn run_job(
    job: Job,
    config: JobConfig,
    reporting: &Reporting,
) -> anyhow::Result<ExitCode> {
    run_job_with(job, config, reporting, &mut NoHooks).await
}

/// [`run_job`], with `hooks` told when the job starts and ends.
pub async fn run_job_with(
    job: Job,
    config: JobConfig,
    reporting: &Reporting,
    hooks: &mut dyn RunHooks,
) -> anyhow::Result<ExitCode> {
    let handle = job.start(config);
    let control = handle.control();
    hooks.started(&control);
    let join = handle.join();
    tokio::pin!(join);

    // Streams made once, before the loop: a signal between two turns of
    // the loop is kept for the next, not lost with a dropped future.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the SIGINT handler")?;
    let mode = reporting.progress.resolved();
    let bar = (mode == ProgressMode::Bar).then(crate::progress::start_bar);
    if let Some(path) = reporting.status_file.clone() {
        // An OS thread: busy workers delay tokio's timers, and a probe must not lag.
        let control = control.clone();
        std::thread::spawn(move || {
            loop {
                if let Err(e) = write_json(&path, &status_json(&control.progress())) {
                    crate::events::StatusFileFailed {
                        path: &path,
                        error: &e,
                    }
                    .emit();
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
    }
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(200));
    let every = reporting
        .progress_interval
        .unwrap_or(Duration::from_secs(10));
    let mut last_line = Instant::now();
    let mut rate = crate::progress::RecentRate::default();
    let outcome = loop {
        let signal = tokio::select! {
            outcome = &mut join => break outcome,
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            _ = ticker.tick() => {
                let p = control.progress();
                let rate = rate.observe(&p);
                match (&bar, mode) {
                    (Some(bar), _) => crate::progress::update_bar(bar, &p, rate),
                    (None, ProgressMode::Plain | ProgressMode::Json) if last_line.elapsed() >= every => {
                        last_line = Instant::now();
                        if mode == ProgressMode::Json {
                            eprintln!("{}", crate::progress::progress_json(&p, rate));
                        } else {
                            crate::events::ProgressReported { line: crate::progress::progress_text(&p, rate) }.emit();
                        }
                    }
                    _ => {}
                }
                continue;
            }
        };
        crate::events::CancelRequested { signal }.emit();
        control.cancel();
    };
    if let Some(bar) = &bar {
        crate::progress::finish_bar(bar);
    }
    hooks.ended(&outcome, &control.progress());
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            let error = anyhow::Error::from(error);
            if !is_disk_full(&error) {
                return Err(error);
            }
            // The volumes and the checkpoint a rerun resumes from, which
            // only this run knows.
            let mut places: Vec<&str> = vec![reporting.state.as_str()];
            // `out` names tables too (`table dst`), which are on no local volume.
            places.extend(
                reporting
                    .out
                    .split(", ")
                    .filter(|o| !o.starts_with("table ")),
            );
            let last = control.progress().last_checkpoint;
            return Err(DiskFull(describe_disk_full(&error, &places, last)).into());
        }
    };
    if let Some(path) = &reporting.summary_json {
        let (name, summary) = match &outcome {
            Outcome::Completed(s) => ("completed", Some(s)),
            Outcome::Cancelled { summary, .. } => ("cancelled", Some(summary)),
            Outcome::Discarded { summary, .. } => ("discarded", Some(summary)),
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
                reporting.out
            );
            Ok(ExitCode::SUCCESS)
        }
        Outcome::AlreadyComplete { checkpoint } => {
            println!(
                "already complete: the job in {} finished at checkpoint {checkpoint}; nothing to do",
                reporting.state
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
        Outcome::Discarded { resumes_from, .. } => {
            eprintln!(
                "cancelled without a savepoint: the work since {} was discarded; run the same \
                 command to resume from there",
                resumes_from.map_or_else(|| "the start".to_string(), |c| format!("checkpoint {c}"))
            );
            Ok(ExitCode::from(3))
        }
    }
}

/// Runs `future` on a multi-threaded runtime; errors print and exit 1.
pub fn main_with<F>(future: F) -> ExitCode
where
    F: Future<Output = anyhow::Result<ExitCode>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the tokio runtime");
    exit_code(runtime.block_on(future))
}

/// Prints an error and returns exit code 1.
pub fn exit_code(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", describe_error(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes, outermost first, each said once: a cause whose
/// words its outer error already quotes (as `tidewater::Error::Storage`
/// quotes the object store's error, which quotes the file system's) is not
/// repeated. A full disk gets the remedy.
pub fn describe_error(error: &anyhow::Error) -> String {
    // Said in full already, by the run that knew its volumes.
    if let Some(full) = error.downcast_ref::<DiskFull>() {
        return full.0.clone();
    }
    let mut text = causes_once(error);
    if is_disk_full(error) {
        text.push_str(
            ". The volume is full: free space there, or point --out and --state at another \
             volume; running the same command again resumes from the last completed checkpoint",
        );
    }
    text
}

/// The causes of `error`, outermost first, each said once.
fn causes_once(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let words = cause.to_string();
        if text.contains(words.as_str()) {
            continue;
        }
        // A cause that quotes everything said so far replaces it.
        if !text.is_empty() && words.contains(text.as_str()) {
            text = words;
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&words);
    }
    text
}

/// A run that filled its disk, said in full ([`describe_disk_full`]).
#[derive(Debug)]
pub struct DiskFull(pub String);

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DiskFull {}

/// Whether a cause of `error` is a full disk.
fn is_disk_full(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull)
            || cause.to_string().contains("No space left on device")
            || cause.to_string().contains("os error 28")
    })
}

/// The message of a run that filled its disk: the causes once each, the
/// volumes of `places` (the state and the outputs) with their free space,
/// and the checkpoint (`last`, 0: none) that running again resumes from.
pub fn describe_disk_full(error: &anyhow::Error, places: &[&str], last: u64) -> String {
    let causes = causes_once(error);
    let volumes = crate::volume::describe(places);
    let resume = if last > 0 {
        format!("checkpoint {last}")
    } else {
        "the start (no checkpoint was completed)".to_string()
    };
    let mut text = format!("{causes}. The disk is full");
    if !volumes.is_empty() {
        text.push_str(": ");
        text.push_str(&volumes.join("; "));
    }
    text.push_str(&format!(
        ". Free space there, or point --out and --state at another volume; running the same \
         command again resumes from {resume}"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meaningless_durations_sizes_and_counts_are_refused_with_what_to_give() {
        assert_eq!(parse_interval("off").map(|i| i.0), Ok(None));
        assert_eq!(
            parse_interval("1s").map(|i| i.0),
            Ok(Some(Duration::from_secs(1)))
        );
        assert_eq!(
            parse_positive_duration("250ms"),
            Ok(Duration::from_millis(250))
        );
        let refused: [(&str, Result<(), String>, &str); 6] = [
            ("0s", parse_interval("0s").map(drop), "above zero, or 'off'"),
            (
                "soon",
                parse_interval("soon").map(drop),
                "not a duration like 500ms",
            ),
            (
                "off",
                parse_positive_duration("off").map(drop),
                "cannot be turned off",
            ),
            (
                "0ms",
                parse_positive_duration("0ms").map(drop),
                "above zero",
            ),
            ("0B", parse_size("0B").map(drop), "above zero"),
            ("0", parse_at_least_one("0").map(drop), "at least 1"),
        ];
        for (text, got, says) in refused {
            let why = got.expect_err(text);
            assert!(why.contains(says), "{text}: {why}");
        }
    }

    #[derive(Debug)]
    struct Quoting(String, Option<Box<Quoting>>);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn each_cause_is_said_once_outermost_first() {
        // Three levels, each quoting the next: said once.
        let disk = "Unable to copy data to file: No space left on device (os error 28)";
        let store = format!("Generic LocalFileSystem error: {disk}");
        let outer = format!("storage: stage 'part-00003' failed: {store}");
        let error = anyhow::Error::new(Quoting(
            outer.clone(),
            Some(Box::new(Quoting(
                store,
                Some(Box::new(Quoting(disk.into(), None))),
            ))),
        ));
        let text = describe_error(&error);
        assert_eq!(text.matches("No space left on device").count(), 1, "{text}");
        assert!(text.starts_with(&outer), "{text}");
        assert!(text.contains("The volume is full"), "{text}");
        assert!(
            text.contains("resumes from the last completed checkpoint"),
            "{text}"
        );
        // Causes that add something are kept, outermost first.
        let error =
            anyhow::Error::new(Quoting("bad table".into(), None)).context("opening --state x");
        assert_eq!(describe_error(&error), "opening --state x: bad table");
    }

    #[test]
    fn a_full_disk_names_its_volume_and_the_checkpoint_a_rerun_resumes_from() {
        let disk = "Unable to copy data to file: No space left on device (os error 28)";
        let error = anyhow::Error::new(Quoting(
            format!("storage: stage 'part-00003' failed: {disk}"),
            Some(Box::new(Quoting(disk.into(), None))),
        ));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out").display().to_string();
        let text = describe_disk_full(&error, &[&out, "s3://bucket/state"], 12);
        assert_eq!(text.matches("No space left on device").count(), 1, "{text}");
        assert!(
            text.contains("The disk is full: the volume mounted at "),
            "{text}"
        );
        assert!(text.contains(&format!("holds {out} (")), "{text}");
        assert!(
            text.ends_with("running the same command again resumes from checkpoint 12"),
            "{text}"
        );
        let fresh = describe_disk_full(&error, &[], 0);
        assert!(
            fresh.ends_with("resumes from the start (no checkpoint was completed)"),
            "{fresh}"
        );
    }
}
