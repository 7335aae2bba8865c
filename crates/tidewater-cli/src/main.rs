//! `tidewater`: run, validate and inspect backfills declared in TOML specs.
//!
//! ```text
//! tidewater run backfill.toml
//! tidewater validate backfill.toml --connect
//! tidewater checkpoints list ./tidewater-state
//! tidewater checkpoints inspect ./tidewater-state 12 --job backfill
//! tidewater jobs
//! tidewater status backfill
//! tidewater cancel backfill
//! tidewater resume backfill
//! tidewater run backfill.toml --http 127.0.0.1:7373
//! tidewater serve --http 127.0.0.1:7373 --run 2
//! ```
//!
//! Exit codes: 0 complete (or already complete), 1 failed, 2 spec or usage
//! error, 3 cancelled and resumable.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tidewater_cli::commands::{checkpoints, jobs, run, serve, validate};
use tidewater_cli::runner::main_with;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Checkpointed, resumable backfills from TOML specs.
#[derive(Debug, Parser)]
#[command(name = "tidewater", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a spec's job; run it again with the same state to resume.
    Run(run::RunCommand),
    /// Check a spec without running it (exit 0 or 2).
    Validate(validate::ValidateCommand),
    /// List and inspect checkpoints in a state store.
    #[command(subcommand)]
    Checkpoints(checkpoints::CheckpointsCommand),
    /// List the jobs in the job store.
    Jobs(jobs::JobsCommand),
    /// Show a job: state, progress, last checkpoint, lease, error.
    Status(jobs::StatusCommand),
    /// Ask a running job to take a savepoint and stop.
    Cancel(jobs::CancelCommand),
    /// Run a job again from its last checkpoint, with its stored spec.
    Resume(jobs::ResumeCommand),
    /// Serve the HTTP API over a job store; with --run N, execute its queued jobs.
    Serve(serve::ServeCommand),
}

fn main() -> ExitCode {
    // Before any PostgreSQL connection (connectors or job store) may use TLS.
    tidewater_postgres::install_crypto_provider();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Run(c) => main_with(run::run(c)),
        Command::Validate(c) => main_with(validate::validate(c)),
        Command::Checkpoints(c) => main_with(checkpoints::checkpoints(c)),
        Command::Jobs(c) => main_with(jobs::jobs(c)),
        Command::Status(c) => main_with(jobs::status(c)),
        Command::Cancel(c) => main_with(jobs::cancel(c)),
        Command::Resume(c) => main_with(jobs::resume(c)),
        Command::Serve(c) => main_with(serve::serve(c)),
    }
}
