//! `tidewater serve`: the HTTP API over a job store and, with `--run N`, a
//! worker that executes the store's queued jobs, N at a time.
//!
//! Each job runs in its own `tidewater resume` process, which takes the
//! job's lease like any worker (so several `serve --run` processes, on one
//! machine or many sharing a PostgreSQL store, never run a job twice) and
//! whose crash costs that job a restart, not the server. A job whose
//! worker stopped renewing its lease is taken over once the lease runs out.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tidewater_core::events::InternalEvent;
use tidewater_jobs::{JobId, JobRecord, JobState};
use tokio::process::{Child, Command};

use crate::events::{WorkerExited, WorkerStarted};
use crate::supervise::{StoreArgs, now_ms};

/// Where `serve` listens without --http.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7373";

/// Serve the HTTP API over a job store (and with --run N, execute its
/// queued jobs).
#[derive(Debug, clap::Args)]
pub struct ServeCommand {
    /// The job store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Where the API listens (default 127.0.0.1:7373), and its token.
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
    /// Also execute queued jobs (and jobs whose worker's lease ran out), at
    /// most N at a time, each in a `tidewater resume` process of its own.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub run: usize,
    /// The lease ttl of the jobs it runs.
    #[arg(long, default_value = "30s", value_parser = super::run::parse_ttl)]
    pub lease_ttl: Duration,
    /// How often the store is polled for jobs to run.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll: Duration,
}

/// The jobs to start now, oldest first: queued ones, then running ones
/// whose lease ran out at `now_ms` (their worker is gone), none already
/// started here, at most `room`.
pub fn runnable(
    jobs: &[JobRecord],
    now_ms: i64,
    started: &dyn Fn(JobId) -> bool,
    room: usize,
) -> Vec<JobId> {
    let mut queued: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| j.state == JobState::Queued)
        .collect();
    let mut orphaned: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| {
            j.state == JobState::Running && j.lease.as_ref().is_none_or(|l| l.expires_ms < now_ms)
        })
        .collect();
    queued.sort_by_key(|j| j.id);
    orphaned.sort_by_key(|j| j.id);
    queued
        .into_iter()
        .chain(orphaned)
        .map(|j| j.id)
        .filter(|id| !started(*id))
        .take(room)
        .collect()
}

/// Serves until SIGINT or SIGTERM; the jobs it runs then take savepoints.
pub async fn serve(command: ServeCommand) -> anyhow::Result<ExitCode> {
    crate::runner::init_logging_for(crate::runner::ProgressMode::Plain);
    if let Err(why) = command.http.check() {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(super::USAGE));
    }
    let store = command.store.open().await?;
    let addr = match command.http.addr {
        Some(addr) => addr,
        None => DEFAULT_ADDR.parse::<SocketAddr>()?,
    };
    let server = crate::http::start(addr, command.http.token.as_deref(), store.clone()).await?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("installing the SIGINT handler")?;
    let mut workers: HashMap<JobId, Child> = HashMap::new();
    let mut poll = tokio::time::interval(command.poll);
    loop {
        tokio::select! {
            _ = poll.tick() => {}
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
        workers.retain(|id, child| match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                WorkerExited {
                    job: *id,
                    status: &status.to_string(),
                }
                .emit();
                false
            }
            Err(e) => {
                WorkerExited {
                    job: *id,
                    status: &e.to_string(),
                }
                .emit();
                false
            }
        });
        let room = command.run.saturating_sub(workers.len());
        if room == 0 {
            continue;
        }
        // A store that cannot be read now may answer at the next poll.
        let Ok(jobs) = store.list(None).await else {
            continue;
        };
        for id in runnable(&jobs, now_ms(), &|id| workers.contains_key(&id), room) {
            match spawn_worker(&command, id) {
                Ok(child) => {
                    WorkerStarted {
                        job: id,
                        pid: child.id().unwrap_or(0),
                    }
                    .emit();
                    workers.insert(id, child);
                }
                Err(e) => WorkerExited {
                    job: id,
                    status: &format!("not started: {e}"),
                }
                .emit(),
            }
        }
    }
    // Each worker ends as SIGTERM ends a run: at a savepoint, resumable.
    for (id, child) in &mut workers {
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) with a pid this process spawned and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        let status = child.wait().await;
        let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
        WorkerExited {
            job: *id,
            status: &status,
        }
        .emit();
    }
    server.stop();
    Ok(ExitCode::SUCCESS)
}

fn spawn_worker(command: &ServeCommand, id: JobId) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
    Command::new(exe)
        .arg("resume")
        .arg(id.to_string())
        .args(["--progress", "plain"])
        .arg("--lease-ttl")
        .arg(humantime::format_duration(command.lease_ttl).to_string())
        // In the environment, not the arguments: a store URL may hold a password.
        .env("TIDEWATER_STORE", command.store.url())
        .env_remove("TIDEWATER_HTTP_TOKEN")
        .stdin(std::process::Stdio::null())
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidewater_jobs::lease::LeaseRecord;
    use tidewater_jobs::{Owner, Report};

    fn job(id: JobId, state: JobState, expires_ms: Option<i64>) -> JobRecord {
        JobRecord {
            id,
            name: format!("job-{id}"),
            state_url: "/tmp/s".into(),
            state,
            spec: String::new(),
            spec_path: None,
            idempotency_key: None,
            progress: Report::default(),
            error: None,
            lease: expires_ms.map(|expires_ms| LeaseRecord {
                owner: Owner {
                    host: "h".into(),
                    pid: 1,
                },
                acquired_ms: 0,
                expires_ms,
            }),
            epoch: 1,
            discard: false,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn queued_jobs_first_then_running_jobs_whose_lease_ran_out() {
        let jobs = [
            job(9, JobState::Queued, None),
            job(8, JobState::Running, Some(500)),
            job(7, JobState::Running, Some(2_000)),
            job(6, JobState::Cancelling, Some(500)),
            job(5, JobState::Succeeded, None),
            job(4, JobState::Failed, None),
            job(3, JobState::Queued, None),
            job(2, JobState::Cancelled, None),
        ];
        let none = |_| false;
        assert_eq!(runnable(&jobs, 1_000, &none, 10), vec![3, 9, 8]);
        assert_eq!(runnable(&jobs, 1_000, &none, 2), vec![3, 9]);
        assert_eq!(runnable(&jobs, 1_000, &|id| id == 3, 10), vec![9, 8]);
        assert_eq!(runnable(&jobs, 3_000, &none, 10), vec![3, 9, 7, 8]);
        assert!(runnable(&jobs, 1_000, &none, 0).is_empty());
    }
}
