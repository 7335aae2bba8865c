//! `tidewater jobs`, `tidewater status JOB` and `tidewater cancel JOB`:
//! the job store's records, read and changed from any process (with a
//! PostgreSQL store, from any machine).

use std::process::ExitCode;
use std::time::Duration;

use tidewater_jobs::{JobRecord, JobState};

use crate::supervise::{StoreArgs, now_ms};

/// List the jobs in the job store, newest first.
#[derive(Debug, clap::Args)]
pub struct JobsCommand {
    /// Only the jobs in this state (queued, running, succeeded, failed,
    /// cancelling, cancelled).
    #[arg(long)]
    pub state: Option<JobState>,
    /// Print JSON (one array of job records) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The job store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Show one job: state, progress, rate and ETA, last checkpoint and
/// exposure, lease, error.
#[derive(Debug, clap::Args)]
pub struct StatusCommand {
    /// The job's id, or its name.
    pub job: String,
    /// Print the job record as JSON.
    #[arg(long)]
    pub json: bool,
    /// The job store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Ask a job to stop: its worker sees the cancel at its next heartbeat,
/// takes a savepoint and ends CANCELLED; a queued job is cancelled at once.
/// `tidewater resume JOB` (or `tidewater run` of its spec) continues it.
#[derive(Debug, clap::Args)]
pub struct CancelCommand {
    /// The job's id, or its name.
    pub job: String,
    /// Take no savepoint: the worker stops at once and aborts the work its
    /// last completed checkpoint does not hold; resuming continues from
    /// that checkpoint.
    #[arg(long)]
    pub discard: bool,
    /// The job store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `tidewater jobs`.
pub async fn jobs(command: JobsCommand) -> anyhow::Result<ExitCode> {
    let store = command.store.open().await?;
    let jobs = store.list(command.state).await?;
    if command.json {
        println!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        println!("no jobs in {}", command.store.url());
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>5}  {:<24} {:<10} {:>22}  {:>10}  {:<12}",
        "ID", "NAME", "STATE", "ROWS", "CHECKPOINT", "UPDATED"
    );
    for job in &jobs {
        println!(
            "{:>5}  {:<24} {:<10} {:>22}  {:>10}  {:<12}",
            job.id,
            job.name,
            job.state.as_str(),
            rows(job),
            job.progress
                .last_checkpoint
                .map_or_else(|| "-".to_string(), |c| format!("#{c}")),
            format!("{} ago", age(job.updated_ms)),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `tidewater status JOB`.
pub async fn status(command: StatusCommand) -> anyhow::Result<ExitCode> {
    let store = command.store.open().await?;
    let job = store.find(&command.job).await?;
    if command.json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        print!("{}", describe(&job));
    }
    Ok(ExitCode::SUCCESS)
}

/// `tidewater cancel JOB`.
pub async fn cancel(command: CancelCommand) -> anyhow::Result<ExitCode> {
    let store = command.store.open().await?;
    let job = store.find(&command.job).await?;
    let job = store.cancel(job.id, command.discard).await?;
    match job.state {
        JobState::Cancelling if command.discard => println!(
            "job {} ('{}') is CANCELLING: its worker stops at its next heartbeat (within a few \
             seconds) without a savepoint; `tidewater resume {}` continues from its last checkpoint",
            job.id, job.name, job.id
        ),
        JobState::Cancelling => println!(
            "job {} ('{}') is CANCELLING: its worker takes a savepoint at its next heartbeat \
             (within a few seconds) and stops; `tidewater resume {}` continues it",
            job.id, job.name, job.id
        ),
        state => println!("job {} ('{}') is {state}", job.id, job.name),
    }
    Ok(ExitCode::SUCCESS)
}

/// `1200/5000 (24.0%)`.
fn rows(job: &JobRecord) -> String {
    let done = job.progress.rows_done;
    match job.progress.rows_total {
        Some(total) if total > 0 => {
            format!(
                "{done}/{total} ({:.1}%)",
                done as f64 * 100.0 / total as f64
            )
        }
        _ => format!("{done}/?"),
    }
}

/// How long ago `ms` was, rounded for reading.
fn age(ms: i64) -> String {
    let seconds = (now_ms() - ms).max(0) as u64 / 1000;
    humantime::format_duration(Duration::from_secs(seconds)).to_string()
}

/// The status page of one job.
pub fn describe(job: &JobRecord) -> String {
    let p = &job.progress;
    let mut out = format!("job {} '{}': {}\n", job.id, job.name, job.state);
    let rate = p
        .rows_per_second
        .map_or_else(String::new, |r| format!(", {:.2}M rows/s", r / 1e6));
    let eta = match (job.state, p.eta_seconds) {
        (JobState::Running, Some(s)) => format!(", ETA {}", crate::progress::eta_text(s)),
        (JobState::Running, None) => ", ETA unknown".to_string(),
        _ => String::new(),
    };
    out += &format!("  progress:    {} rows{rate}{eta}\n", rows(job));
    match (p.last_checkpoint, p.last_checkpoint_ms) {
        (Some(id), Some(at)) => out += &format!("  checkpoint:  #{id}, {} ago\n", age(at)),
        _ => out += "  checkpoint:  none yet\n",
    }
    if job.state.has_worker() {
        out += &format!(
            "  exposure:    {} rows, {:.1}s since the last checkpoint (what a crash now would redo)\n",
            p.exposure_rows,
            p.exposure_ms as f64 / 1000.0
        );
    }
    if let Some(throttle) = &p.throttle {
        out += &format!("  throttled:   {throttle}\n");
    }
    match &job.lease {
        Some(lease) => {
            let left = (lease.expires_ms - now_ms()).max(0) as f64 / 1000.0;
            out += &format!(
                "  lease:       {}, epoch {}, runs out in {left:.0}s unless renewed\n",
                lease.owner, job.epoch
            );
        }
        None => out += &format!("  lease:       none (last epoch {})\n", job.epoch),
    }
    if let Some(error) = &job.error {
        out += &format!(
            "  error:       {} ({}{})\n",
            error.message,
            error.code,
            if error.retryable { ", retryable" } else { "" }
        );
    }
    out += &format!("  state:       {}\n", job.state_url);
    if let Some(path) = &job.spec_path {
        out += &format!("  spec:        {path}\n");
    }
    out += &format!("  updated:     {} ago\n", age(job.updated_ms));
    out
}

/// Run a job again from its last checkpoint or savepoint, with the spec it
/// was submitted with (as stored, `${env:NAME}` expanded anew).
#[derive(Debug, clap::Args)]
pub struct ResumeCommand {
    /// The job's id, or its name.
    pub job: String,
    /// How progress is shown (as for `run`).
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: crate::runner::ProgressMode,
    /// How long the job's lease lasts unless renewed.
    #[arg(long, default_value = "30s", value_parser = super::run::parse_ttl)]
    pub lease_ttl: Duration,
    /// Take the job's lease even while another process holds it.
    #[arg(long)]
    pub steal: bool,
    /// The job store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// The HTTP API, as for `run`.
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
}

/// `tidewater resume JOB`.
pub async fn resume(command: ResumeCommand) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let store = command.store.open().await?;
    let job = store.find(&command.job).await?;
    if job.state == JobState::Succeeded {
        println!(
            "already complete: job {} ('{}') succeeded; nothing to do",
            job.id, job.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    // The stored spec, in a file named as the original, so that messages
    // about it read as they did.
    let dir = std::env::temp_dir().join(format!("tidewater-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = job
        .spec_path
        .as_deref()
        .and_then(|p| std::path::Path::new(p).file_name())
        .map_or_else(|| "spec.toml".into(), |n| n.to_os_string());
    let spec = dir.join(name);
    std::fs::write(&spec, &job.spec).with_context(|| format!("writing {}", spec.display()))?;
    let run = super::run::RunCommand {
        spec,
        state: Some(job.state_url.clone()),
        parallelism: None,
        checkpoint_interval: None,
        progress: command.progress,
        progress_interval: crate::runner::Interval(Some(Duration::from_secs(10))),
        summary_json: None,
        status_file: None,
        store: command.store.clone(),
        idempotency_key: None,
        lease_ttl: command.lease_ttl,
        steal: command.steal,
        http: command.http.clone(),
        http_linger: Duration::ZERO,
    };
    let code = super::run::run(run).await;
    let _ = std::fs::remove_dir_all(&dir);
    code
}
