//! Parquet and checkpoints on object storage, killed at random instants: the
//! backfill with state and output on a real S3-protocol server, a
//! Parquet-to-Parquet copy of many files killed mid-file (on S3 and on a
//! local folder), and retention that never deletes what the newest
//! checkpoint needs.
//!
//! The S3 tests run when `TIDEWATER_S3_BUCKET` (and the usual `AWS_*`
//! variables) are set, as `scripts/test.sh` does after `scripts/s3.sh up`;
//! with `TIDEWATER_REQUIRE_S3` set they fail instead of skipping.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use tidewater::open_location;

use common::{
    Backfill, Rng, assert_copy_output, checkpoint_folder, download, example_binary,
    kill_randomly_until_complete, read_output, s3_prefix, text, walk,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Asserts that the newest complete checkpoint under `state` (job `job`) has
/// every object its manifest lists: what a restore would need. Returns the
/// size of its largest blob (0 before the first checkpoint).
fn assert_newest_checkpoint_whole(state: &str, job: &str) -> u64 {
    let location = open_location(state).expect("open state");
    runtime().block_on(async {
        let root = location.prefix.clone().join(job);
        let objects: Vec<String> = location
            .store
            .list(Some(&root))
            .map_ok(|o| o.location.to_string())
            .try_collect()
            .await
            .expect("list state");
        let Some(manifest) = objects
            .iter()
            .filter(|o| o.ends_with("/_MANIFEST.json"))
            .max()
        else {
            return 0; // killed before the first checkpoint
        };
        let bytes = location
            .store
            .get(&manifest.as_str().into())
            .await
            .expect("get manifest")
            .bytes()
            .await
            .expect("manifest bytes");
        let record: serde_json::Value = serde_json::from_slice(&bytes).expect("manifest JSON");
        let folder = manifest.trim_end_matches("/_MANIFEST.json");
        let mut largest = 0;
        for blob in record["blobs"].as_array().expect("blobs") {
            // A blob an earlier checkpoint wrote (an incremental chain's
            // base or delta) is in that checkpoint's folder.
            let folder = match blob["written_in"].as_u64() {
                Some(id) => format!("{root}/{}", checkpoint_folder(id)),
                None => folder.to_string(),
            };
            let path = format!("{folder}/{}", blob["path"].as_str().expect("blob path"));
            assert!(
                objects.contains(&path),
                "the newest checkpoint lists '{path}', which retention deleted"
            );
            largest = largest.max(blob["bytes"].as_u64().expect("blob bytes"));
        }
        largest
    })
}

/// Every row of a copy's output, sorted: (id, k, v, s, w).
fn rows(batches: &[RecordBatch]) -> Vec<(i64, i64, u64, String, u64)> {
    let mut rows = Vec::new();
    for batch in batches {
        let id = batch
            .column_by_name("id")
            .expect("id")
            .as_primitive::<Int64Type>();
        let k = batch
            .column_by_name("k")
            .expect("k")
            .as_primitive::<Int64Type>();
        let v = batch
            .column_by_name("v")
            .expect("v")
            .as_primitive::<Float64Type>();
        let w = batch
            .column_by_name("w")
            .expect("w")
            .as_primitive::<Float64Type>();
        let s = batch.column_by_name("s").expect("s").as_string::<i32>();
        for i in 0..batch.num_rows() {
            rows.push((
                id.value(i),
                k.value(i),
                v.value(i).to_bits(),
                s.value(i).to_string(),
                w.value(i).to_bits(),
            ));
        }
    }
    rows.sort_unstable();
    rows
}

/// Asserts no tiny files: per writer, every file but its last is at least
/// half the target size.
fn assert_no_tiny_files(files: &[(String, u64)], target: u64) {
    let mut by_writer: std::collections::BTreeMap<String, Vec<(String, u64)>> = Default::default();
    for (name, size) in files {
        // part-{uid}-{subtask}-{seq}.parquet
        let (writer, _seq) = name.rsplit_once('-').expect("file name");
        let writer = writer.to_string();
        by_writer
            .entry(writer)
            .or_default()
            .push((name.clone(), *size));
    }
    for (writer, mut files) in by_writer {
        files.sort();
        for (name, size) in &files[..files.len() - 1] {
            assert!(
                *size >= target / 2,
                "{writer}: '{name}' is {size} bytes, under half the {target}-byte target"
            );
        }
    }
}

/// The core crash test with state and output on S3: `mode` is the backfill's.
/// Skipped without an S3 server.
///
/// With `first_kill_after_blob`, the first run is killed as soon as the
/// newest checkpoint holds a blob larger than that, whatever the timing (a
/// loaded host may otherwise kill every run before such a checkpoint, or
/// let a run finish first), and the random kills follow from there.
fn backfill_on_s3_survives_random_kills(
    mode: &'static str,
    keys: u64,
    name: &str,
    extra: &[&str],
    first_kill_after_blob: Option<u64>,
) {
    let Some(base) = s3_prefix(name) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let rows = 3_000_000;
    let state = format!("{base}/state");
    let job = Backfill {
        state: state.clone().into(),
        out: format!("{base}/out").into(),
        target_file_size: Some("16MiB"),
        extra: extra.iter().map(|a| a.to_string()).collect(),
        ..Backfill::new(dir.path(), mode, rows, keys)
    };
    let mut rng = Rng::from_time();
    let command = || {
        let mut command = job.command();
        command.arg("--retain=1");
        command
    };
    if let Some(wanted) = first_kill_after_blob {
        let mut child = command()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawning the job");
        loop {
            if assert_newest_checkpoint_whole(&state, "backfill") > wanted {
                break;
            }
            assert!(
                child.try_wait().expect("poll child").is_none(),
                "the job ended before a checkpoint held a blob over {wanted} bytes"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("wait for child");
    }
    let (output, kills) =
        kill_randomly_until_complete(command, 6, Duration::from_millis(1500), &mut rng, || {
            assert_newest_checkpoint_whole(&state, "backfill");
        });
    assert!(
        output.status.success(),
        "final run failed:\n{}",
        text(&output)
    );
    eprintln!("{mode}: completed after {kills} kills");
    assert_newest_checkpoint_whole(&state, "backfill");
    let local = dir.path().join("downloaded");
    download(&format!("{base}/out"), &local);
    match mode {
        "copy" => assert_copy_output(&local, rows, keys),
        _ => common::assert_aggregate_output(&local, rows, keys),
    }
}

#[test]
fn backfill_copy_with_state_and_output_on_s3_survives_random_kills() {
    backfill_on_s3_survives_random_kills("copy", 50_000, "backfill-copy", &[], None);
}

#[test]
fn backfill_aggregate_with_state_and_output_on_s3_survives_random_kills() {
    backfill_on_s3_survives_random_kills("aggregate", 50_000, "backfill-aggregate", &[], None);
}

/// 600k keys: each merging aggregate's state grows to ~9.6 MB, uploaded
/// in 8 MiB parts of a multipart upload as it is encoded. The first run is
/// killed once a checkpoint holds such a state, so the next one restores
/// it; held to 1.5M rows/s (about two seconds a run), later runs are
/// killed at random, mid-upload too.
#[test]
fn backfill_aggregate_with_state_uploaded_in_parts_survives_random_kills() {
    backfill_on_s3_survives_random_kills(
        "aggregate",
        600_000,
        "backfill-parts",
        &["--rows-per-second=1500000"],
        Some(8 << 20),
    );
}

/// Makes a multi-file Parquet input (2M rows) with the backfill example.
fn make_input(out: &str, state: &str) {
    let output = Command::new(example_binary("backfill"))
        .args([
            "--rows",
            "3000000",
            "--keys",
            "50000",
            "--target-file-size",
            "2MiB",
        ])
        .args(["--out", out, "--state", state])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run backfill");
    assert!(
        output.status.success(),
        "making the input failed:\n{}",
        text(&output)
    );
}

/// Copies a multi-file input with kills in the middle of files; the output
/// has exactly the input's rows, in files of the target size.
fn copy_survives_kills(base: &str, local: &Path, max_delay: Duration, parallelism: &str) {
    let input = format!("{base}/in");
    make_input(&input, &format!("{base}/in-state"));
    let target: u64 = 4 << 20;
    let output = format!("{base}/copy");
    let state = format!("{base}/copy-state");
    let command = || {
        let mut command = Command::new(example_binary("parquet_copy"));
        command
            .args(["--input", &input, "--output", &output, "--state", &state])
            .args([
                "--checkpoint-interval",
                "100ms",
                "--parallelism",
                parallelism,
            ])
            .args(["--target-file-size", "4MiB", "--retain", "1"])
            .env("RUST_LOG", "info");
        command
    };
    let mut rng = Rng::from_time();
    let (run, kills) = kill_randomly_until_complete(command, 6, max_delay, &mut rng, || {
        assert_newest_checkpoint_whole(&state, "parquet-copy");
    });
    assert!(run.status.success(), "final copy failed:\n{}", text(&run));
    eprintln!("copy completed after {kills} kills");
    assert!(
        kills >= 3,
        "only {kills} kills landed before the copy completed"
    );

    let (in_dir, out_dir) = (local.join("in"), local.join("out"));
    download(&input, &in_dir);
    let files = download(&output, &out_dir);
    let (want, got) = (rows(&read_output(&in_dir)), rows(&read_output(&out_dir)));
    assert_eq!(
        want.len(),
        2_000_000,
        "the input has the rows the backfill wrote"
    );
    assert_eq!(got.len(), want.len(), "row count differs from the input");
    assert!(got == want, "the copy's rows differ from the input's");
    assert!(
        files.len() >= 4,
        "expected several output files, got {files:?}"
    );
    assert_no_tiny_files(&files, target);
}

#[test]
fn parquet_copy_on_s3_survives_kills_mid_file() {
    let Some(base) = s3_prefix("copy") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // Kills within 500 ms: the whole copy takes little more than a second,
    // and at least three kills must land before it completes.
    copy_survives_kills(&base, dir.path(), Duration::from_millis(500), "2");
}

#[test]
fn parquet_copy_on_a_local_folder_survives_kills_mid_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().join("lake");
    let base = format!("file://{}", base.display());
    std::fs::create_dir_all(dir.path().join("lake")).expect("lake folder");
    // One writer, kills within 250 ms: a local copy takes about a second
    // whole on an idle machine, and at least three kills must land before it
    // completes. (Within 400 ms, two long-lived runs could finish it.)
    copy_survives_kills(
        &base,
        &dir.path().join("check"),
        Duration::from_millis(250),
        "1",
    );
    // Nothing staged is left once the job completed.
    let staged = dir.path().join("lake/copy/_staging");
    let leftovers: Vec<_> = walk(&staged);
    assert!(
        leftovers.is_empty(),
        "staged parts left behind: {leftovers:?}"
    );
}

fn manifest(checkpoint: u64, epoch: u64) -> tidewater::checkpoint::Manifest {
    use tidewater::checkpoint::{CheckpointKind, Manifest, manifest::MANIFEST_FORMAT};
    Manifest {
        format: MANIFEST_FORMAT,
        job: "fence".into(),
        checkpoint: tidewater::CheckpointId(checkpoint),
        kind: CheckpointKind::Periodic,
        epoch: tidewater::Epoch(epoch),
        created_at_ms: 0,
        fingerprint: String::new(),
        partitioner: None,
        key_groups: None,
        operators: vec![],
        blobs: vec![],
        commits: vec![],
        rows_read: 0,
    }
}

#[test]
fn on_s3_a_manifest_is_create_only_and_a_zombie_is_fenced() {
    use tidewater::Error;
    use tidewater::checkpoint::StateStore;
    let Some(base) = s3_prefix("fence") else {
        return;
    };
    runtime().block_on(async {
        let location = open_location(&base).expect("open");
        let old = StateStore::new(&location, "fence");
        let epoch = old.claim_epoch().await.expect("claim");
        old.write_manifest(&manifest(1, epoch.0))
            .await
            .expect("first manifest");
        // The conditional put refuses a second manifest for the same checkpoint.
        let again = old.write_manifest(&manifest(1, epoch.0)).await.unwrap_err();
        assert!(matches!(again, Error::Fenced { .. }), "{again}");

        // A new worker takes the job; the old one is a zombie from now on.
        let new = StateStore::new(&location, "fence");
        let newer = new.claim_epoch().await.expect("claim");
        assert!(newer > epoch);
        let zombie = old.check_epoch(epoch).await.unwrap_err();
        assert!(matches!(zombie, Error::Fenced { .. }), "{zombie}");
    });
}

#[test]
fn on_s3_without_conditional_writes_a_job_still_completes_and_says_why() {
    let Some(base) = s3_prefix("no-conditional") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let job = Backfill {
        state: format!("{base}/state").into(),
        out: format!("{base}/out").into(),
        ..Backfill::new(dir.path(), "aggregate", 200_000, 1_000)
    };
    let output = job
        .command()
        .env("AWS_CONDITIONAL_PUT", "disabled")
        .output()
        .expect("run");
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("no conditional writes"),
        "the fallback was not reported:\n{}",
        text(&output)
    );
    let local = dir.path().join("downloaded");
    download(&format!("{base}/out"), &local);
    common::assert_aggregate_output(&local, 200_000, 1_000);
}

#[test]
fn an_unreadable_input_file_is_named_or_goes_to_dead_letters() {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in");
    make_input(
        &input.to_string_lossy(),
        &dir.path().join("in-state").to_string_lossy(),
    );
    let want = rows(&read_output(&input));
    std::fs::write(input.join("broken.parquet"), b"PAR1 this is not parquet").expect("write");
    let copy = |name: &str, extra: &[&str]| {
        Command::new(example_binary("parquet_copy"))
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(dir.path().join(name))
            .arg("--state")
            .arg(dir.path().join(format!("{name}-state")))
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run parquet_copy")
    };

    let failed = copy("strict", &[]);
    assert!(!failed.status.success(), "a broken input was accepted");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("'broken.parquet' is not a readable Parquet file"),
        "the error does not name the file:\n{}",
        text(&failed)
    );

    let letters = dir.path().join("dead-letters");
    let skipped = copy("lenient", &["--dead-letters", &letters.to_string_lossy()]);
    assert!(skipped.status.success(), "{}", text(&skipped));
    let record = std::fs::read_to_string(letters.join("broken.parquet.json"))
        .expect("a dead letter for the broken file");
    assert!(record.contains("broken.parquet"), "{record}");
    let got = rows(&read_output(&dir.path().join("lenient")));
    assert_eq!(got.len(), 2_000_000);
    assert!(got == want, "the readable files were not copied exactly");
}

/// A run paused (SIGSTOP) while a second run takes over its state and
/// output on S3, then woken (SIGCONT) while the second works on the same
/// open files: every committed file is whole and a later run always
/// finishes the job. Before a successor took over the multipart upload of a
/// resumed file, the woken run could replace the successor's part (S3
/// numbers parts by position) and no run could ever complete that file.
#[test]
fn on_s3_a_woken_run_never_tears_a_file_or_wedges_the_job() {
    let Some(base) = s3_prefix("paused") else {
        return;
    };
    let mut rng = Rng::from_time();
    let (rows, keys) = (6_000_000, 100_000);
    let trials = 5;
    let mut exact = 0;
    for trial in 1..=trials {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = format!("{base}/{trial}/out");
        // The default 128 MiB target: each writer's file stays open, with
        // 8 MiB parts uploaded as it grows.
        let job = Backfill {
            state: format!("{base}/{trial}/state").into(),
            out: out.clone().into(),
            ..Backfill::new(dir.path(), "copy", rows, keys)
        };
        let spawn = || {
            job.command()
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawning the backfill")
        };
        let mut first = spawn();
        std::thread::sleep(Duration::from_millis(700 + rng.below(800)));
        common::signal(&first, "STOP");
        let mut second = spawn();
        std::thread::sleep(Duration::from_millis(300 + rng.below(900)));
        common::signal(&first, "CONT");
        let first_status = common::wait_or_kill(&mut first, Duration::from_secs(180));
        let second_status = common::wait_or_kill(&mut second, Duration::from_secs(180));

        let last = job.run();
        assert!(
            last.status.success(),
            "trial {trial}: a later run could not finish the job (first run {first_status:?}, \
             second {second_status:?}):\n{}",
            text(&last)
        );
        // Every committed file reads whole (read_output names one that does not).
        let local = dir.path().join("downloaded");
        download(&out, &local);
        let mut ids: Vec<i64> = read_output(&local)
            .iter()
            .flat_map(|b| {
                b.column_by_name("id")
                    .expect("id")
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        ids.sort_unstable();
        let expected: Vec<i64> = (0..rows as i64).filter(|i| i % 3 != 0).collect();
        exact += usize::from(ids == expected);
        eprintln!(
            "trial {trial}: first run {first_status:?}, second {second_status:?}, output {}",
            if ids == expected {
                "exact"
            } else {
                "not exact"
            }
        );
    }
    eprintln!("{exact} of {trials} trials left exact output");
}

#[test]
fn s3_without_credentials_says_so_and_how_to_provide_them() {
    // No server is needed, and none is contacted: with the metadata lookup
    // turned off, the missing credentials are refused before any request.
    let dir = tempfile::tempdir().expect("temp dir");
    let job = Backfill {
        state: "s3://some-bucket/x".into(),
        ..Backfill::new(dir.path(), "copy", 1000, 10)
    };
    let mut command = job.command();
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SKIP_SIGNATURE",
    ] {
        command.env_remove(var);
    }
    command.env("AWS_EC2_METADATA_DISABLED", "true");
    let started = std::time::Instant::now();
    let output = command.output().expect("running the backfill");
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no S3 credentials were found"), "{stderr}");
    assert!(
        stderr.contains("AWS_ACCESS_KEY_ID") && stderr.contains("AWS_EC2_METADATA_DISABLED"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
