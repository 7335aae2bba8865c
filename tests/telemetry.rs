//! What a job reports, read as an operator's dashboard would read it: the
//! metrics its typed events record through the `metrics` facade, caught by
//! a real recorder (metrics-util's debugging recorder, installed for this
//! test binary alone). A run to completion, a rerun over the completed job,
//! and a restore that falls back past a damaged checkpoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tidewater::RateLimit;
use tidewater::prelude::*;

fn recorder() -> &'static Snapshotter {
    static SNAPSHOTTER: std::sync::OnceLock<Snapshotter> = std::sync::OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        snapshotter
    })
}

/// Every metric recorded so far, as (name, sorted labels) -> (counter
/// total, histogram samples). Taking a snapshot drains the recorder, so
/// every snapshot is folded in here and read from here.
fn totals() -> std::sync::MutexGuard<'static, Totals> {
    static TOTALS: std::sync::Mutex<Totals> = std::sync::Mutex::new(Vec::new());
    let mut totals = TOTALS.lock().unwrap_or_else(|e| e.into_inner());
    for (key, _, _, value) in recorder().snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        labels.sort();
        let (counted, samples) = match value {
            DebugValue::Counter(n) => (n, 0),
            DebugValue::Histogram(values) => (0, values.len()),
            DebugValue::Gauge(_) => (0, 0),
        };
        let name = key.name().to_string();
        match totals.iter_mut().find(|t| t.0 == name && t.1 == labels) {
            Some(entry) => {
                entry.2 += counted;
                entry.3 += samples;
            }
            None => totals.push((name, labels, counted, samples)),
        }
    }
    totals
}

type Totals = Vec<(String, Vec<(String, String)>, u64, usize)>;

fn matching<'a>(
    totals: &'a Totals,
    name: &'a str,
    labels: &'a [(&str, &str)],
) -> impl Iterator<Item = &'a (String, Vec<(String, String)>, u64, usize)> {
    totals.iter().filter(move |(n, have, ..)| {
        n == name
            && labels
                .iter()
                .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
    })
}

/// The counter `name` with every label of `labels`, summed over the other labels.
fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    let totals = totals();
    matching(&totals, name, labels).map(|t| t.2).sum()
}

/// How many samples the histogram `name` of `job` holds.
fn histogram_count(name: &str, job: &str) -> usize {
    let totals = totals();
    matching(&totals, name, &[("job", job)]).map(|t| t.3).sum()
}

fn job(name: &str, out: &Path, rows: u64, rate: Option<f64>) -> Job {
    let pipeline = Pipeline::new(name).with_parallelism(2);
    let mut source = pipeline.source("generator", GeneratorSource::new(rows, 1000));
    if let Some(rate) = rate {
        source = source.throttle(RateLimit::new(rate));
    }
    source
        .key_by(["k"])
        .aggregate("aggregate", AggregateSpec::new().count("count"))
        .sink("parquet", ParquetSink::open(out.to_str().unwrap()).unwrap());
    pipeline.build().unwrap()
}

fn config(state: &Path) -> JobConfig {
    JobConfig::new(state.to_str().unwrap())
        .unwrap()
        .checkpoint_every_rows(Some(100_000))
        .checkpoint_interval(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reports_its_checkpoints_commits_and_ending() {
    recorder();
    let dir = tempfile::tempdir().unwrap();
    let (state, out) = (dir.path().join("state"), dir.path().join("out"));
    let name = "telemetry-complete";
    let outcome = job(name, &out, 1_000_000, None)
        .run(config(&state))
        .await
        .unwrap();
    let Outcome::Completed(summary) = outcome else {
        panic!("expected completion, got {outcome:?}")
    };
    let job_label = [("job", name)];
    // Each checkpoint of the run's own summary is counted once, by kind.
    for kind in ["periodic", "final"] {
        let in_summary = summary
            .checkpoints
            .iter()
            .filter(|c| format!("{:?}", c.kind).to_lowercase() == kind)
            .count() as u64;
        assert_eq!(
            counter(
                "tidewater_checkpoints_completed_total",
                &[("job", name), ("kind", kind)]
            ),
            in_summary,
            "{kind} checkpoints"
        );
    }
    assert!(
        summary
            .checkpoints
            .iter()
            .any(|c| format!("{:?}", c.kind) == "Final")
    );
    assert_eq!(
        counter("tidewater_checkpoints_completed_total", &job_label),
        summary.checkpoints.len() as u64,
        "one completed-checkpoint event per checkpoint"
    );
    assert_eq!(
        histogram_count("tidewater_checkpoint_duration_seconds", name),
        summary.checkpoints.len()
    );
    // The final checkpoint commits the aggregate's output, one handle per writer.
    assert!(
        counter(
            "tidewater_sink_commits_total",
            &[("job", name), ("uid", "parquet")]
        ) >= 2
    );
    assert_eq!(
        counter(
            "tidewater_restores_total",
            &[("job", name), ("from", "start")]
        ),
        1
    );
    assert_eq!(
        counter(
            "tidewater_runs_ended_total",
            &[("job", name), ("outcome", "completed")]
        ),
        1
    );

    // Over the completed job a run does nothing, and says so.
    let again = job(name, &out, 1_000_000, None)
        .run(config(&state))
        .await
        .unwrap();
    assert!(
        matches!(again, Outcome::AlreadyComplete { .. }),
        "{again:?}"
    );
    assert_eq!(
        counter(
            "tidewater_runs_ended_total",
            &[("job", name), ("outcome", "already_complete")]
        ),
        1
    );
    assert_eq!(counter("tidewater_runs_started_total", &job_label), 2);
}

fn newest_checkpoint(state: &Path, job: &str) -> PathBuf {
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(state.join(job))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_MANIFEST.json").exists())
        .collect();
    manifests.sort();
    manifests.pop().expect("a completed checkpoint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_past_a_damaged_checkpoint_reports_the_fallback() {
    recorder();
    let dir = tempfile::tempdir().unwrap();
    let (state, out) = (dir.path().join("state"), dir.path().join("out"));
    let name = "telemetry-fallback";
    // Slow enough to cancel mid-way: half the rows at once, the rest over seconds.
    let handle = job(name, &out, 1_000_000, Some(200_000.0)).start(config(&state));
    let started = std::time::Instant::now();
    while handle.progress().checkpoints < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no two checkpoints within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.cancel();
    let cancelled = handle.join().await.unwrap();
    assert!(
        matches!(cancelled, Outcome::Cancelled { .. }),
        "{cancelled:?}"
    );
    assert_eq!(
        counter("tidewater_savepoints_requested_total", &[("job", name)]),
        1
    );
    // Damage the savepoint's aggregate state (the merging aggregate's: the
    // pre-aggregation hands its partials on before each barrier).
    let savepoint = newest_checkpoint(&state, name);
    let blob = std::fs::read_dir(savepoint.join("aggregate"))
        .unwrap()
        .next()
        .expect("an aggregate blob")
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();

    let resumed = job(name, &out, 1_000_000, None)
        .run(config(&state))
        .await
        .unwrap();
    assert!(matches!(resumed, Outcome::Completed(_)), "{resumed:?}");
    assert_eq!(
        counter("tidewater_checkpoint_fallbacks_total", &[("job", name)]),
        1
    );
    assert_eq!(
        counter(
            "tidewater_restores_total",
            &[("job", name), ("from", "checkpoint")]
        ),
        1
    );
}

/// A state store slower than the checkpoint interval (every write waits
/// 150 ms; the interval is 20 ms): checkpoints are not piled up in memory
/// but taken one after another, each late, and every late one is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_behind_a_slow_store_are_reported_as_delayed() {
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    recorder();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let name = "telemetry-slow-store";
    let slow = Arc::new(ThrottledStore::new(
        object_store::memory::InMemory::new(),
        ThrottleConfig {
            wait_put_per_call: Duration::from_millis(150),
            ..ThrottleConfig::default()
        },
    ));
    let location = tidewater::StoreLocation {
        store: slow,
        multipart: None,
        local_folder: None,
        prefix: object_store::path::Path::from("state"),
        display: "a slow in-memory store".into(),
    };
    let interval = Duration::from_millis(20);
    let config = JobConfig::with_location(location).checkpoint_interval(Some(interval));
    let outcome = job(name, &out, 400_000, Some(200_000.0))
        .run(config)
        .await
        .unwrap();
    let Outcome::Completed(summary) = outcome else {
        panic!("expected completion, got {outcome:?}")
    };
    let periodic = summary
        .checkpoints
        .iter()
        .filter(|c| format!("{:?}", c.kind) == "Periodic")
        .count() as u64;
    assert!(periodic >= 3, "{periodic} periodic checkpoints in 2 s");
    // Each took longer than the interval, so each after the first started
    // late (the first too, when the run was slow to start).
    let delayed = counter("tidewater_checkpoints_delayed_total", &[("job", name)]);
    assert!(
        (periodic - 1..=periodic).contains(&delayed),
        "{delayed} delayed of {periodic} periodic checkpoints"
    );
    assert_eq!(
        histogram_count("tidewater_checkpoint_delay_seconds", name),
        delayed as usize
    );
}
