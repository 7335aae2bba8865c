//! `tidewater checkpoints list|inspect`: what a state store holds.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tidewater_core::checkpoint::{Manifest, StateStore};
use tidewater_core::{CheckpointId, StoreLocation, open_location};

/// List or inspect checkpoints.
#[derive(Debug, clap::Subcommand)]
pub enum CheckpointsCommand {
    /// Every checkpoint of every job (or of one) in a state store.
    List {
        /// The state store: a folder or URL.
        state: String,
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
        /// The retention the job runs with, to say which checkpoints it keeps.
        #[arg(long, default_value_t = 3)]
        retain: usize,
    },
    /// One checkpoint, per operator and subtask.
    Inspect {
        /// The state store: a folder or URL.
        state: String,
        /// The checkpoint's id.
        checkpoint: u64,
        /// The job (needed when the store holds several).
        #[arg(long)]
        job: Option<String>,
    },
}

/// Runs the subcommand.
pub async fn checkpoints(command: CheckpointsCommand) -> anyhow::Result<ExitCode> {
    match command {
        CheckpointsCommand::List { state, job, retain } => list(&state, job, retain).await,
        CheckpointsCommand::Inspect {
            state,
            checkpoint,
            job,
        } => inspect(&state, CheckpointId(checkpoint), job).await,
    }
}

fn open(state: &str) -> anyhow::Result<StoreLocation> {
    open_location(state).with_context(|| format!("opening the state store {state}"))
}

/// The jobs under a state store: its top-level folders.
async fn jobs(location: &StoreLocation, state: &str) -> anyhow::Result<Vec<String>> {
    let listing = location
        .store
        .list_with_delimiter(Some(&location.prefix))
        .await
        .with_context(|| format!("listing the state store {state}"))?;
    let mut jobs: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_string))
        .collect();
    jobs.sort();
    Ok(jobs)
}

async fn list(state: &str, job: Option<String>, retain: usize) -> anyhow::Result<ExitCode> {
    let location = open(state)?;
    let jobs = match job {
        Some(job) => vec![job],
        None => jobs(&location, state).await?,
    };
    if jobs.is_empty() {
        println!("no jobs in {state}");
        return Ok(ExitCode::SUCCESS);
    }
    let now = SystemTime::now();
    for job in jobs {
        let store = StateStore::new(&location, &job);
        let (complete, folders) = store
            .list_checkpoints()
            .await
            .with_context(|| format!("listing the checkpoints of job {job}"))?;
        let retention = store
            .retention(retain, &mut Default::default())
            .await
            .with_context(|| format!("reading the retained checkpoints of job {job}"))?;
        println!("job {job}: {} checkpoints", complete.len());
        println!(
            "  {:>6}  {:<10} {:<20} {:>9} {:>10} {:>6} {:>12}  retention (--retain {retain})",
            "id", "kind", "time (UTC)", "age", "bytes", "epoch", "rows read"
        );
        for id in folders {
            let deleted = retention.victims.contains(&id);
            if !complete.contains(&id) {
                let why = match id < complete.iter().copied().min().unwrap_or(id) {
                    true if deleted => "left by a crash; deleted by the next checkpoint",
                    true => "older than the complete ones; may hold a base or deltas they list",
                    false => "in flight, or left by a crash",
                };
                println!("  {:>6}  incomplete (no manifest: {why})", id.0);
                continue;
            }
            let keep = match (deleted, retention.retired.contains(&id)) {
                (true, _) => "deleted by the next checkpoint",
                (false, true) => {
                    "manifest deleted by the next checkpoint; blobs kept for later ones"
                }
                (false, false) => "kept",
            };
            match store.read_manifest(id).await {
                Ok(m) => println!("  {}  {keep}", row(&m, now)),
                Err(e) => println!("  {:>6}  unreadable: {e}", id.0),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn row(m: &Manifest, now: SystemTime) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(m.created_at_ms);
    let age = now.duration_since(at).unwrap_or_default();
    let bytes: u64 = m.blobs.iter().map(|b| b.bytes).sum();
    format!(
        "{:>6}  {:<10} {:<20} {:>9} {:>10} {:>6} {:>12}",
        m.checkpoint.0,
        format!("{:?}", m.kind).to_lowercase(),
        humantime::format_rfc3339_seconds(at)
            .to_string()
            .trim_end_matches('Z'),
        humantime::format_duration(Duration::from_secs(age.as_secs())).to_string(),
        bytes,
        m.epoch.0,
        m.rows_read
    )
}

async fn inspect(state: &str, id: CheckpointId, job: Option<String>) -> anyhow::Result<ExitCode> {
    let location = open(state)?;
    let job = match job {
        Some(job) => job,
        None => {
            let jobs = jobs(&location, state).await?;
            match jobs.as_slice() {
                [one] => one.clone(),
                [] => anyhow::bail!("no jobs in {state}"),
                many => {
                    eprintln!(
                        "error: {state} holds several jobs ({}); say which with --job NAME",
                        many.join(", ")
                    );
                    return Ok(ExitCode::from(super::USAGE));
                }
            }
        }
    };
    let store = StateStore::new(&location, &job);
    let m = store.read_manifest(id).await.with_context(|| {
        format!("reading checkpoint {id} of job {job}; `tidewater checkpoints list {state}` shows which exist")
    })?;
    println!(
        "checkpoint {} of job {job}: {:?}, epoch {}, {} rows read, partitioner {}, {}",
        m.checkpoint.0,
        m.kind,
        m.epoch.0,
        m.rows_read,
        m.partitioner
            .as_ref()
            .map_or("none recorded".to_string(), |p| format!(
                "{} v{}",
                p.name, p.version
            )),
        m.key_groups.map_or(
            "key groups not recorded (the default applies on resume)".to_string(),
            |g| format!("{g} key groups")
        )
    );
    let mut bad = 0;
    for op in &m.operators {
        println!(
            "  {} ({:?}, kind {}, state version {}, parallelism {}{})",
            op.uid,
            op.role,
            op.kind,
            op.state_version
                .map_or("none".to_string(), |v| v.to_string()),
            op.parallelism,
            if op.rescalable && op.state_version.is_some() {
                ", rescalable"
            } else {
                ""
            }
        );
        for blob in m.blobs.iter().filter(|b| b.uid == op.uid) {
            let (status, state) = match store.read_blob(id, blob).await {
                Ok(batch) => ("checksum ok".to_string(), Some(batch)),
                Err(e) => {
                    bad += 1;
                    (format!("BAD: {e}"), None)
                }
            };
            println!(
                "    subtask {}: {} bytes of state, {status}",
                blob.subtask, blob.bytes
            );
            if op.kind == "parquet"
                && let Some(batch) = state
            {
                match tidewater_parquet::describe_writer_state(&op.uid, blob.subtask, &batch) {
                    Ok(text) => println!("      {text}"),
                    Err(e) => println!("      sink state unreadable: {e}"),
                }
            }
        }
        for commit in m.commits.iter().filter(|c| c.uid == op.uid) {
            println!(
                "    subtask {}: commit handle {}",
                commit.subtask, commit.payload
            );
        }
    }
    if bad > 0 {
        println!("{bad} blobs failed verification: a restore falls back past this checkpoint");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
