//! `tidewater run SPEC.toml`.

use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Duration;

use anyhow::Context;
use tidewater_core::JobConfig;
use tidewater_core::checkpoint::store::StateStore;
use tidewater_jobs::StoreError;

use crate::build::{self, BuildError};
use crate::events::JobForgotten;
use crate::runner::{self, Interval, Reporting};
use crate::supervise::{self, Admission, Request, StoreArgs};
use tidewater_core::events::InternalEvent;

/// Run a spec's job. Flags override the spec's `[job]` settings.
#[derive(Debug, clap::Args)]
pub struct RunCommand {
    /// The spec.
    pub spec: PathBuf,
    /// Where checkpoints go: a folder or URL (default: the spec's `state`).
    #[arg(long)]
    pub state: Option<String>,
    /// Subtasks per operator (default: the spec's `parallelism`).
    #[arg(long, value_parser = runner::parse_usize_at_least_one)]
    pub parallelism: Option<usize>,
    /// Time between checkpoints, or `off` (default: the spec's).
    #[arg(long, value_parser = runner::parse_interval)]
    pub checkpoint_interval: Option<Interval>,
    /// How progress is shown: `auto` (a bar on a terminal, else a line
    /// every --progress-interval), `bar`, `plain`, `json` (one object per
    /// line on stderr) or `off`.
    #[arg(long, value_enum, default_value = "auto")]
    pub progress: runner::ProgressMode,
    /// Time between progress lines without a terminal.
    #[arg(long, default_value = "10s", value_parser = runner::parse_interval)]
    pub progress_interval: Interval,
    /// Write a JSON summary of the run here when it ends.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Rewrite live progress as JSON here every 20 ms.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// The job store that holds the job's record and lease.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Submitting again with the same key returns the job of the first
    /// submission (its id and state) instead of starting a second one.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// How long the job's lease lasts unless renewed (renewed every
    /// quarter of it): how soon another process may take over after this
    /// one stops answering.
    #[arg(long, default_value = "30s", value_parser = parse_ttl)]
    pub lease_ttl: Duration,
    /// Take the job's lease even while another process holds it: for a
    /// holder known to be gone for good. The holder, should it wake, is
    /// fenced and commits nothing more.
    #[arg(long)]
    pub steal: bool,
    /// The HTTP API of this run's job store and this process's metrics.
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
    /// Keep serving --http this long after the job ends, so that a last
    /// scrape sees the final metrics.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub http_linger: Duration,
}

pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a duration like 30s or 2m: {e}"))?;
    if ttl < Duration::from_millis(400) {
        return Err("the lease ttl must be at least 400ms".into());
    }
    Ok(ttl)
}

/// Runs the job: 0 complete, 1 failed, 2 spec error, 3 cancelled.
pub async fn run(command: RunCommand) -> anyhow::Result<ExitCode> {
    let mut spec = match super::load_spec(&command.spec) {
        Ok(spec) => spec,
        Err(code) => return Ok(code),
    };
    runner::init_logging_for(command.progress);
    if let Err(why) = command.http.check() {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(super::USAGE));
    }
    if let Some(state) = &command.state {
        spec.job.state = state.clone();
    }
    if let Some(interval) = command.checkpoint_interval {
        spec.job.checkpoint_interval = interval.0;
    }
    let parallelism = command.parallelism.unwrap_or(spec.job.parallelism);
    let url = command.store.url();
    let store = command.store.open().await?;
    let server = match command.http.addr {
        Some(addr) => {
            Some(crate::http::start(addr, command.http.token.as_deref(), store.clone()).await?)
        }
        None => None,
    };
    let location = tidewater_core::open_location(&spec.job.state)
        .with_context(|| format!("opening the state store {}", spec.job.state))?;
    let min_epoch = StateStore::new(&location, &spec.job.name)
        .newest_epoch()
        .await
        .with_context(|| format!("reading the epochs in the state store {}", spec.job.state))?
        .map_or(0, |e| e.0);
    let state_url = identity(&spec.job.state);
    let request = || Request {
        name: &spec.job.name,
        state_url: &state_url,
        spec: &spec.source.text,
        spec_path: &command.spec,
        key: command.idempotency_key.as_deref(),
    };
    let mut admission = supervise::submit(store.clone(), &url, request()).await?;
    if let Admission::Succeeded(job) = &admission
        && min_epoch == 0
    {
        // It succeeded, and its state location is empty now: it is run anew.
        JobForgotten {
            id: job.id,
            name: &job.name,
            state: &spec.job.state,
        }
        .emit();
        store.forget(job.id).await?;
        admission = supervise::submit(store, &url, request()).await?;
    }
    let pending = match admission {
        Admission::Run(pending) => pending,
        Admission::SameKey(job) => {
            println!(
                "job {} ('{}') was submitted with this idempotency key before; it is {}; \
                 nothing new was started (`tidewater status {}` tells more)",
                job.id, job.name, job.state, job.id
            );
            return Ok(ExitCode::SUCCESS);
        }
        Admission::Succeeded(job) => {
            println!(
                "already complete: job {} ('{}') succeeded; nothing to do",
                job.id, job.name
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let job = match build::build(&spec, parallelism).await {
        Ok(job) => job,
        Err(BuildError::Spec(d)) => return Ok(super::report(&d)),
        Err(BuildError::Connect(d)) => {
            eprintln!("{d}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let config = JobConfig::with_location(location)
        .checkpoint_interval(spec.job.checkpoint_interval)
        .retain(spec.job.retain)
        .key_groups(spec.job.key_groups)
        .incremental_checkpoints(spec.job.incremental_checkpoints)
        .full_checkpoint_every(spec.job.full_checkpoint_every);
    let mut supervised = match pending
        .lease(command.lease_ttl, min_epoch, command.steal)
        .await
    {
        Ok(supervised) => supervised,
        Err(e @ StoreError::Held { .. }) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    };
    let config = config.lease(supervised.lease());
    let reporting = Reporting {
        summary_json: command.summary_json,
        status_file: command.status_file,
        state: spec.job.state.clone(),
        out: outputs(&spec),
        progress: command.progress,
        progress_interval: command.progress_interval.0,
    };
    let code = runner::run_job_with(job, config, &reporting, &mut supervised).await;
    supervised.finish().await;
    if let Some(server) = server {
        linger(command.http_linger).await;
        server.stop();
    }
    code
}

/// Waits `time`, or until SIGINT or SIGTERM: the run's own signal
/// handlers replaced the default ones, which would have ended the process.
async fn linger(time: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    if time.is_zero() {
        return;
    }
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::select! {
        _ = tokio::time::sleep(time) => {}
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
}

/// The state location as the job store names it: a local folder by its
/// absolute path, so that runs from different folders agree.
pub(crate) fn identity(state: &str) -> String {
    if state.contains("://") && !state.starts_with("file://") {
        return state.to_string();
    }
    let path = state.strip_prefix("file://").unwrap_or(state);
    std::path::absolute(path).map_or_else(|_| state.to_string(), |p| p.display().to_string())
}

/// The sinks, for the closing line.
fn outputs(spec: &crate::spec::Spec) -> String {
    use crate::spec::Kind;
    spec.components
        .iter()
        .filter_map(|c| match &c.kind {
            Kind::ParquetSink { path, .. } => Some(path.clone()),
            Kind::PostgresSink { table, .. } => Some(format!("table {table}")),
            Kind::KafkaSink { topic, .. } => Some(format!("topic {topic}")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(", ")
}
