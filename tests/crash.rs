//! The central promise: kill -9 the job at random instants, any number of
//! times; restarted with the same state it completes, and the committed output
//! equals that of one failure-free run. No lost row, no duplicated row, no
//! double-counted aggregate.

mod common;

use std::time::Duration;

use common::{
    Backfill, Rng, assert_aggregate_output, assert_copy_output, kill_randomly_until_complete, text,
};

/// Kills per mode: the issue asks for at least 20 over the test, both modes.
const KILLS_PER_MODE: usize = 12;

fn crash_until_complete(mode: &'static str, rows: u64, keys: u64) {
    let mut rng = Rng::from_time();
    let mut kills = 0;
    let mut rounds = 0;
    while kills < KILLS_PER_MODE {
        rounds += 1;
        let dir = tempfile::tempdir().expect("temp dir");
        let job = Backfill::new(dir.path(), mode, rows, keys);
        // Kill anywhere from start-up and restore to the final commit.
        let (output, restarts) = kill_randomly_until_complete(
            || job.command(),
            KILLS_PER_MODE - kills,
            Duration::from_millis(700),
            &mut rng,
            || {},
        );
        kills += restarts;
        assert!(
            output.status.success(),
            "final run failed:\n{}",
            text(&output)
        );
        eprintln!("{mode}: round {rounds} completed after {restarts} kills");
        match mode {
            "copy" => assert_copy_output(&job.out, rows, keys),
            _ => assert_aggregate_output(&job.out, rows, keys),
        }
        // Over a completed job's state, a run says so and changes nothing.
        let again = job.run();
        assert!(again.status.success(), "rerun failed:\n{}", text(&again));
        assert!(
            String::from_utf8_lossy(&again.stdout).contains("already complete"),
            "rerun did not say the job was complete:\n{}",
            text(&again)
        );
        match mode {
            "copy" => assert_copy_output(&job.out, rows, keys),
            _ => assert_aggregate_output(&job.out, rows, keys),
        }
    }
}

#[test]
fn copy_mode_survives_random_kills() {
    crash_until_complete("copy", 6_000_000, 100_000);
}

#[test]
fn aggregate_mode_survives_random_kills() {
    // Aggregate mode runs several times faster: more rows keep kills landing mid-run.
    crash_until_complete("aggregate", 30_000_000, 100_000);
}
