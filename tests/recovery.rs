//! Recovery paths a user meets: cancel then resume, a corrupted newest
//! checkpoint, a pipeline changed between runs, and bad flags.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Backfill, assert_aggregate_output, assert_copy_output, checkpoint_id, text};

const ROWS: u64 = 6_000_000;
/// Aggregate mode runs several times faster than copy mode: it gets more rows,
/// so that it is still running when a test stops it after a checkpoint.
const AGGREGATE_ROWS: u64 = 8 * ROWS;

fn rows_for(mode: &str) -> u64 {
    if mode == "aggregate" {
        AGGREGATE_ROWS
    } else {
        ROWS
    }
}
const KEYS: u64 = 100_000;
const WAIT: Duration = Duration::from_secs(60);

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn cancel_takes_a_savepoint_and_the_next_run_resumes_from_it() {
    for mode in ["copy", "aggregate"] {
        let dir = tempfile::tempdir().unwrap();
        let rows = rows_for(mode);
        let mut job = Backfill::new(dir.path(), mode, rows, KEYS);
        job.interval = "100ms";
        let mut child = job.spawn();
        assert!(
            job.wait_for_manifests(&mut child, 1, WAIT),
            "no checkpoint before the cancel"
        );
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let cancelled = child.wait_with_output().unwrap();
        assert_eq!(cancelled.status.code(), Some(3), "{}", text(&cancelled));
        assert!(
            stderr(&cancelled).contains("cancelled at savepoint"),
            "{}",
            text(&cancelled)
        );
        let newest = job.manifests().pop().expect("a manifest");
        let manifest = std::fs::read_to_string(&newest).unwrap();
        assert!(
            manifest.contains("\"kind\": \"savepoint\""),
            "newest checkpoint is not a savepoint: {manifest}"
        );

        let resumed = job.run();
        assert!(resumed.status.success(), "{}", text(&resumed));
        let stdout = String::from_utf8_lossy(&resumed.stdout);
        assert!(
            stdout.contains("resumed from checkpoint"),
            "{}",
            text(&resumed)
        );
        match mode {
            "copy" => assert_copy_output(&job.out, rows, KEYS),
            _ => assert_aggregate_output(&job.out, rows, KEYS),
        }
    }
}

/// Runs until at least `n` checkpoints exist, then kill -9.
fn run_and_kill_after(job: &Backfill, n: usize) {
    let mut child = job.spawn();
    assert!(
        job.wait_for_manifests(&mut child, n, WAIT),
        "fewer than {n} checkpoints"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

fn blobs_of(manifest: &Path, uid: &str) -> Vec<PathBuf> {
    let dir = manifest.parent().unwrap().join(uid);
    std::fs::read_dir(&dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_corrupted_newest_checkpoint_falls_back_to_the_one_before() {
    // aggregate: the newest checkpoint's aggregate state is damaged (the
    // merging aggregate's: the pre-aggregation beside each source hands its
    // partials on before each barrier and holds none across it).
    // copy: the newest checkpoint's source cursors are damaged, and the output
    // it already committed must be taken back, or those rows would repeat.
    for (mode, uid) in [("aggregate", "aggregate"), ("copy", "generator")] {
        let dir = tempfile::tempdir().unwrap();
        let job = Backfill::new(dir.path(), mode, rows_for(mode), KEYS);
        run_and_kill_after(&job, 2);
        let newest = job.manifests().pop().unwrap();
        let blobs = blobs_of(&newest, uid);
        assert!(
            !blobs.is_empty(),
            "checkpoint {} has no {uid} state",
            newest.display()
        );
        flip_a_byte(&blobs[0]);

        // The run's summary says which checkpoint it passed over, and why.
        let (_, summary) = job.run_with_summary();
        let newest_id = checkpoint_id(&newest);
        let fallbacks = summary["fallbacks"].as_array().expect("fallbacks");
        assert_eq!(fallbacks.len(), 1, "{summary}");
        assert_eq!(fallbacks[0]["checkpoint"], newest_id, "{summary}");
        let reason = fallbacks[0]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(uid),
            "the reason names the damaged state: {reason}"
        );
        match mode {
            "copy" => assert_copy_output(&job.out, ROWS, KEYS),
            _ => assert_aggregate_output(&job.out, AGGREGATE_ROWS, KEYS),
        }
    }
}

#[test]
fn a_changed_pipeline_is_refused_with_the_operator_named() {
    let dir = tempfile::tempdir().unwrap();
    let job = Backfill::new(dir.path(), "copy", ROWS, KEYS);
    run_and_kill_after(&job, 1);

    // Another mode on the same state: the aggregate would miss the rows already read.
    let mut other_mode = job.clone();
    other_mode.mode = "aggregate";
    let refused = other_mode.run();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let message = stderr(&refused);
    // The aggregate, or its pre-aggregation `aggregate.local`, is named.
    assert!(
        message.contains("operator 'aggregate") && message.contains("is new"),
        "{message}"
    );

    // Other data under the same source: its cursors would point elsewhere.
    let mut other_keys = job.clone();
    other_keys.keys = KEYS + 1;
    let refused = other_keys.run();
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let message = stderr(&refused);
    assert!(
        message.contains("operator 'generator'") && message.contains("splits changed"),
        "{message}"
    );

    // The original pipeline still resumes and completes exactly.
    let resumed = job.run();
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_copy_output(&job.out, ROWS, KEYS);
}

#[test]
fn a_job_rescaled_through_a_cancel_and_kills_writes_exact_output() {
    // Parallelism 2, cancelled; 3, killed at random instants; 1, to the end.
    // Keyed state (the aggregate, its pre-aggregations, their partial
    // groups) splits by key group; the Parquet writers' open files are
    // finished and published on the rescale, and a restore of the same
    // checkpoint again finds them published.
    let mut rng = common::Rng::from_time();
    for mode in ["copy", "aggregate"] {
        let dir = tempfile::tempdir().unwrap();
        let rows = rows_for(mode);
        let mut job = Backfill::new(dir.path(), mode, rows, KEYS);
        let mut child = job.spawn();
        assert!(
            job.wait_for_manifests(&mut child, 1, WAIT),
            "no checkpoint before the cancel"
        );
        common::signal(&child, "TERM");
        let cancelled = child.wait_with_output().unwrap();
        assert_eq!(cancelled.status.code(), Some(3), "{}", text(&cancelled));

        job.parallelism = 3;
        let mut rescaled = 0;
        for _ in 0..4 {
            let mut child = job.spawn();
            std::thread::sleep(Duration::from_millis(50 + rng.below(700)));
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            rescaled += stderr(&output)
                .matches("state split among the subtasks")
                .count();
            if output.status.success() {
                break;
            }
        }
        assert!(
            rescaled > 0,
            "{mode}: no run at parallelism 3 rescaled the state"
        );

        job.parallelism = 1;
        let last = job.run();
        assert!(last.status.success(), "{}", text(&last));
        match mode {
            "copy" => assert_copy_output(&job.out, rows, KEYS),
            _ => assert_aggregate_output(&job.out, rows, KEYS),
        }
        eprintln!("{mode}: {rescaled} rescaled starts at parallelism 3, then exact at 1");
    }
}

#[test]
fn bad_flags_get_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let base = Backfill::new(dir.path(), "copy", 1000, 10);
    let zero = Backfill {
        interval: "0s",
        ..base.clone()
    };
    let vague = Backfill {
        interval: "soon",
        ..base.clone()
    };
    let remote = Backfill {
        state: PathBuf::from("gopher://host/x"),
        ..base.clone()
    };
    for (job, expected) in [
        (zero, "above zero"),
        (vague, "not a duration"),
        (remote, "scheme 'gopher'"),
    ] {
        let output = job.run();
        assert!(!output.status.success(), "{job:?} was accepted");
        assert!(
            stderr(&output).contains(expected),
            "{job:?}: {}",
            text(&output)
        );
    }
    // Values that cannot mean anything are refused as usage errors (exit 2),
    // naming the flag, before anything runs.
    let no_keys = Backfill {
        keys: 0,
        ..base.clone()
    };
    let no_subtasks = Backfill {
        parallelism: 0,
        ..base.clone()
    };
    let cases: [(Command, &str); 3] = [
        (no_keys.command(), "'--keys <KEYS>': must be at least 1"),
        (
            no_subtasks.command(),
            "'--parallelism <PARALLELISM>': must be at least 1",
        ),
        (
            {
                let mut command = base.command();
                command.arg("--retain=0");
                command
            },
            "'--retain <RETAIN>': must be at least 1",
        ),
    ];
    for (mut command, expected) in cases {
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", text(&output));
        assert!(stderr(&output).contains(expected), "{}", text(&output));
    }
    assert!(
        !base.state.exists() && !base.out.exists(),
        "a refused run wrote state or output"
    );
}
