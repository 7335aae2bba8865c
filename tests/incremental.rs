//! Incremental checkpoints under the tests of the full ones: kill -9 at
//! random instants while chains of deltas grow (and retention deletes old
//! checkpoints), kill -9 once chains reach the default policy's longest (a
//! base and 99 deltas), crashes at the protocol's instants, and a corrupt
//! delta in the middle of a chain. The output must be exact every time.
//!
//! The job is the backfill example's aggregate, slowed down so that few keys
//! change between two checkpoints: the pre-aggregation beside each source
//! holds its partial groups across checkpoints and writes only the changed
//! ones.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tidewater::checkpoint::incremental::DEFAULT_FULL_EVERY;

use common::{
    Backfill, Rng, assert_aggregate_output, checkpoint_folder, checkpoint_id,
    kill_randomly_until_complete, text,
};

const ROWS: u64 = 600_000;
const KEYS: u64 = 200_000;

/// The aggregate at 100k rows/s in all, with a checkpoint every 50 ms: a
/// batch of 8,192 rows reaches a source subtask's pre-aggregation about
/// every fourth checkpoint, so its deltas hold a few thousand keys, most of
/// them new, and its base all it saw since its chain began. A chain grows
/// to its 11 deltas (`--full-checkpoint-every 12`) once the base holds ten
/// deltas' worth, about a second into a run; before, it starts over as soon
/// as its deltas hold as many rows as its base.
fn incremental_job(dir: &Path, rows: u64) -> Backfill {
    Backfill {
        interval: "50ms",
        extra: [
            "--incremental",
            "--full-checkpoint-every=12",
            "--rows-per-second=100000",
        ]
        .map(String::from)
        .to_vec(),
        ..Backfill::new(dir, "aggregate", rows, KEYS)
    }
}

/// A blob as a manifest lists it: the folder it is in, its path, and
/// whether it is a delta.
struct Listed {
    subtask_of: (String, u64),
    folder: u64,
    path: String,
    delta: bool,
}

/// The blobs a manifest lists, or `None` when it cannot be read (it may be
/// being written, or deleted, as we look).
fn listed(manifest: &Path) -> Option<Vec<Listed>> {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(manifest).ok()?).ok()?;
    let own = checkpoint_id(manifest);
    let blobs = json["blobs"].as_array()?;
    Some(
        blobs
            .iter()
            .map(|b| Listed {
                subtask_of: (
                    b["uid"].as_str().unwrap_or_default().to_string(),
                    b["subtask"].as_u64().unwrap_or_default(),
                ),
                folder: b["written_in"].as_u64().unwrap_or(own),
                path: b["path"].as_str().unwrap_or_default().to_string(),
                delta: b["delta"].as_bool().unwrap_or(false),
            })
            .collect(),
    )
}

/// The longest chain of deltas a manifest lists for one operator subtask.
fn longest_chain(blobs: &[Listed]) -> usize {
    let mut deltas: BTreeMap<&(String, u64), usize> = BTreeMap::new();
    for blob in blobs.iter().filter(|b| b.delta) {
        *deltas.entry(&blob.subtask_of).or_default() += 1;
    }
    deltas.values().copied().max().unwrap_or(0)
}

/// Waits until the newest manifest, written after checkpoint `after`,
/// lists a chain of at least `deltas` deltas for some operator subtask,
/// and returns its blobs. Fails when the run ends first, or after 2 minutes.
fn wait_for_chain(
    job: &Backfill,
    child: &mut Child,
    deltas: usize,
    after: Option<u64>,
) -> Vec<Listed> {
    let started = Instant::now();
    loop {
        assert!(
            child.try_wait().expect("poll").is_none(),
            "the job ended before a chain of {deltas} deltas"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the job wrote no chain of {deltas} deltas in 2 minutes"
        );
        let newest = job
            .manifests()
            .last()
            .filter(|m| Some(checkpoint_id(m)) > after)
            .and_then(|m| listed(m));
        if let Some(blobs) = newest.filter(|blobs| longest_chain(blobs) >= deltas) {
            return blobs;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn blob_file(job: &Backfill, blob: &Listed) -> PathBuf {
    job.state
        .join("backfill")
        .join(checkpoint_folder(blob.folder))
        .join(&blob.path)
}

/// Every blob every complete checkpoint lists is there: retention deleted
/// nothing a retained checkpoint needs.
fn assert_every_listed_blob_exists(job: &Backfill) {
    for manifest in job.manifests() {
        let blobs = listed(&manifest).expect("a manifest at rest is readable");
        for blob in &blobs {
            let file = blob_file(job, blob);
            assert!(
                file.exists(),
                "checkpoint {} lists {} (in checkpoint {}), which is gone",
                checkpoint_id(&manifest),
                blob.path,
                blob.folder
            );
        }
    }
}

/// Every checkpoint folder in the state folder holds a file: retention
/// took the folders of the checkpoints it deleted, and the last run swept
/// the ones its killed predecessors left empty. (Each is walked by every
/// later listing, so they must not pile up over a long job.)
fn assert_no_empty_checkpoint_folder(job: &Backfill) {
    fn holds_a_file(dir: &Path) -> bool {
        std::fs::read_dir(dir).expect("read folder").any(|entry| {
            let entry = entry.expect("folder entry");
            !entry.file_type().expect("file type").is_dir() || holds_a_file(&entry.path())
        })
    }
    let root = job.state.join("backfill");
    let mut folders = 0;
    for entry in std::fs::read_dir(&root).expect("state folder") {
        let path = entry.expect("state folder entry").path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("chk-"))
        {
            folders += 1;
            assert!(holds_a_file(&path), "{} is left empty", path.display());
        }
    }
    assert!(folders > 0, "no checkpoint folder in {}", root.display());
}

#[test]
fn random_kills_during_long_chains_of_deltas_leave_the_output_exact() {
    // About 15 s of work at the job's rate, killed at up to 3 s into each
    // run: most runs grow a chain past 10 deltas before the kill.
    const KILLS: usize = 10;
    const KILL_ROWS: u64 = 3_000_000;
    let mut rng = Rng::from_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let job = incremental_job(dir.path(), KILL_ROWS);

    // Watches the newest manifests for the longest chain while the runs go.
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (job, stop, longest) = (job.clone(), stop.clone(), longest.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(blobs) = job.manifests().last().and_then(|m| listed(m)) {
                    longest.fetch_max(longest_chain(&blobs), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    let (output, kills) = kill_randomly_until_complete(
        || job.command(),
        KILLS,
        Duration::from_millis(3000),
        &mut rng,
        || assert_every_listed_blob_exists(&job),
    );
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    assert!(
        output.status.success(),
        "final run failed:\n{}",
        text(&output)
    );
    eprintln!(
        "completed after {kills} kills; longest chain seen: {} deltas",
        longest.load(Ordering::Relaxed)
    );
    assert!(
        kills >= KILLS / 2,
        "only {kills} kills landed before the job ended"
    );
    assert_aggregate_output(&job.out, KILL_ROWS, KEYS);
    assert_no_empty_checkpoint_folder(&job);
    assert!(
        longest.load(Ordering::Relaxed) >= 10,
        "no chain of 10 deltas was seen: the test did not exercise long chains"
    );
}

/// Kills each run of a job on the default chain policy once a chain of its
/// longest (a base and 99 deltas) is written, at a random instant up to
/// 300 ms later: in the chain's last checkpoints, or the new base's. The
/// next run restores from that chain.
///
/// A chain is that long only when a hundred deltas together hold fewer rows
/// than their base: 4M keys, the first 8M rows read at full speed (a base
/// of ~2.5M keys per source subtask), then 400k rows/s, about one 8,192-row
/// batch per subtask (a delta of ~8k keys) every 40 ms. A restored run
/// starts from that base, so only the first reads at full speed, and the
/// last, which finishes the job.
#[test]
fn kills_after_chains_of_the_default_length_leave_the_output_exact() {
    const KILLS: usize = 3;
    // Room for a run or two whose chain started over before its 99th delta.
    const LONG_ROWS: u64 = 24_000_000;
    const LONG_KEYS: u64 = 4_000_000;
    let longest = DEFAULT_FULL_EVERY as usize - 1;
    let mut rng = Rng::from_time();
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |fast_rows: u64| Backfill {
        interval: "20ms",
        extra: vec![
            "--incremental".into(),
            "--rows-per-second=400000".into(),
            format!("--throttle-after-rows={fast_rows}"),
        ],
        ..Backfill::new(dir.path(), "aggregate", LONG_ROWS, LONG_KEYS)
    };
    let (first, again, last) = (run(8_000_000), run(0), run(LONG_ROWS));

    for kill in 0..KILLS {
        let job = if kill == 0 { &first } else { &again };
        // The chain must be this run's: chains never span runs, and the
        // previous run's newest manifest is still there.
        let before = job.manifests().last().map(|m| checkpoint_id(m));
        // Its logs are not read: a long run would fill a pipe and stall.
        let mut child = job
            .command()
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning the job");
        let started = Instant::now();
        wait_for_chain(job, &mut child, longest, before);
        let delay = rng.below(300);
        eprintln!(
            "run {}: a chain of {longest} deltas after {:.1?}; killed {delay} ms later",
            kill + 1,
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        assert_every_listed_blob_exists(job);
    }
    let finishing = Instant::now();
    let output = last.run();
    eprintln!("the last run took {:.1?}", finishing.elapsed());
    assert!(
        output.status.success(),
        "final run failed:\n{}",
        text(&output)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("resumed from checkpoint"),
        "the final run did not resume from a checkpoint:\n{}",
        text(&output)
    );
    assert_aggregate_output(&last.out, LONG_ROWS, LONG_KEYS);
}

fn crash_at(point: &str, checkpoint: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let job = incremental_job(dir.path(), 200_000);
    job.crash_at_failpoint(point, checkpoint);
    let resumed = job.run();
    assert!(
        resumed.status.success(),
        "restart after {point} failed:\n{}",
        text(&resumed)
    );
    // From the chain the crash left, not from an earlier checkpoint or the start.
    assert!(
        String::from_utf8_lossy(&resumed.stdout).contains("resumed from checkpoint")
            && !String::from_utf8_lossy(&resumed.stderr).contains("unusable"),
        "the restart after {point} did not resume from the newest checkpoint:\n{}",
        text(&resumed)
    );
    assert_aggregate_output(&job.out, 200_000, KEYS);
}

#[test]
fn crashes_at_the_protocol_instants_of_a_delta_checkpoint_recover_exactly() {
    // Checkpoint 6 is the fifth delta of the run's first chain.
    for point in ["before-manifest", "after-manifest", "after-commit"] {
        crash_at(point, 6);
    }
}

#[test]
fn a_corrupt_delta_in_the_middle_of_a_chain_falls_back_to_the_checkpoint_before_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Every checkpoint kept: by default only the newest three are, and
    // they all share the chain, so none before the damaged delta is left.
    let mut job = incremental_job(dir.path(), ROWS);
    job.extra.push("--retain=1000".into());

    // Run until the newest checkpoint has a chain of at least 10 deltas.
    let mut child = job.spawn();
    let chain = wait_for_chain(&job, &mut child, 10, None);
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");

    // The middle delta of the longest chain.
    let longest = chain
        .iter()
        .filter(|b| b.delta)
        .map(|b| &b.subtask_of)
        .max_by_key(|s| {
            chain
                .iter()
                .filter(|b| b.delta && b.subtask_of == **s)
                .count()
        })
        .expect("a chain");
    let deltas: Vec<&Listed> = chain
        .iter()
        .filter(|b| b.delta && b.subtask_of == *longest)
        .collect();
    let victim = deltas[deltas.len() / 2];
    let file = blob_file(&job, victim);
    let mut bytes = std::fs::read(&file).expect("the delta");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, bytes).expect("write");

    // Every complete checkpoint from the damaged delta's on lists it.
    let needing: BTreeSet<u64> = job
        .manifests()
        .iter()
        .map(|m| checkpoint_id(m))
        .filter(|id| *id >= victim.folder)
        .collect();
    let (resumed, summary) = job.run_with_summary();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        stderr.contains("WARN") && stderr.contains("checksum"),
        "the fallback is warned of:\n{stderr}"
    );
    let fallbacks: BTreeSet<u64> = summary["fallbacks"]
        .as_array()
        .expect("fallbacks")
        .iter()
        .filter_map(|f| f["checkpoint"].as_u64())
        .collect();
    assert_eq!(
        fallbacks, needing,
        "passed over exactly the checkpoints that need delta {} of checkpoint {}: {summary}",
        victim.path, victim.folder
    );
    // The chain before the damaged delta is complete and retained.
    let before = format!("resumed from checkpoint {},", victim.folder - 1);
    assert!(
        String::from_utf8_lossy(&resumed.stdout).contains(&before),
        "not {before}\n{}",
        text(&resumed)
    );
    assert_aggregate_output(&job.out, ROWS, KEYS);
}
