//! Crashes at the exact instants of the checkpoint protocol that a random
//! kill -9 rarely hits: just before and after the manifest is written, between
//! two sink commits, and after the commits. A restart must finish with the
//! exact output in every case.

mod common;

use common::{Backfill, assert_aggregate_output, assert_copy_output, text};

const ROWS: u64 = 3_000_000;
const KEYS: u64 = 50_000;

fn crash_at(point: &str, mode: &'static str) {
    // Aggregate mode runs several times faster: more rows, so that it still
    // takes a periodic checkpoint or two before its final one.
    let rows = if mode == "aggregate" { 8 * ROWS } else { ROWS };
    let dir = tempfile::tempdir().expect("temp dir");
    // Small files, so that checkpoints commit files of both subtasks often
    // (mid-commit fires at the first checkpoint from 2 on that has two).
    let job = Backfill {
        target_file_size: Some("1MiB"),
        ..Backfill::new(dir.path(), mode, rows, KEYS)
    };
    // Checkpoint 2 is periodic in copy mode; in aggregate mode it may be the
    // final one. Both must recover.
    job.crash_at_failpoint(point, 2);

    let resumed = job.run();
    assert!(
        resumed.status.success(),
        "restart after {point} failed:\n{}",
        text(&resumed)
    );
    match mode {
        "copy" => assert_copy_output(&job.out, rows, KEYS),
        _ => assert_aggregate_output(&job.out, rows, KEYS),
    }
}

#[test]
fn crash_before_the_manifest() {
    crash_at("before-manifest", "copy");
    crash_at("before-manifest", "aggregate");
}

#[test]
fn crash_after_the_manifest_before_any_commit() {
    crash_at("after-manifest", "copy");
    crash_at("after-manifest", "aggregate");
}

#[test]
fn crash_between_two_sink_commits() {
    crash_at("mid-commit", "copy");
}

#[test]
fn crash_after_the_commits() {
    crash_at("after-commit", "copy");
    crash_at("after-commit", "aggregate");
}
