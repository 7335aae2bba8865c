//! `tidewater run SPEC.toml`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use tidewater_core::JobConfig;

use crate::build::{self, BuildError};
use crate::runner::{self, Interval, Reporting};

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
}

/// Runs the job: 0 complete, 1 failed, 2 spec error, 3 cancelled.
pub async fn run(command: RunCommand) -> anyhow::Result<ExitCode> {
    let mut spec = match super::load_spec(&command.spec) {
        Ok(spec) => spec,
        Err(code) => return Ok(code),
    };
    runner::init_logging_for(command.progress);
    if let Some(state) = &command.state {
        spec.job.state = state.clone();
    }
    if let Some(interval) = command.checkpoint_interval {
        spec.job.checkpoint_interval = interval.0;
    }
    let parallelism = command.parallelism.unwrap_or(spec.job.parallelism);
    let job = match build::build(&spec, parallelism).await {
        Ok(job) => job,
        Err(BuildError::Spec(d)) => return Ok(super::report(&d)),
        Err(BuildError::Connect(d)) => {
            eprintln!("{d}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let config = JobConfig::new(&spec.job.state)
        .with_context(|| format!("opening the state store {}", spec.job.state))?
        .checkpoint_interval(spec.job.checkpoint_interval)
        .retain(spec.job.retain);
    let reporting = Reporting {
        summary_json: command.summary_json,
        status_file: command.status_file,
        state: spec.job.state.clone(),
        out: outputs(&spec),
        progress: command.progress,
        progress_interval: command.progress_interval.0,
    };
    runner::run_job(job, config, &reporting).await
}

/// The sinks, for the closing line.
fn outputs(spec: &crate::spec::Spec) -> String {
    use crate::spec::Kind;
    spec.components
        .iter()
        .filter_map(|c| match &c.kind {
            Kind::ParquetSink { path, .. } => Some(path.clone()),
            Kind::PostgresSink { table, .. } => Some(format!("table {table}")),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(", ")
}
