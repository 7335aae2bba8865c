//! The job store against real SQLite files and a real PostgreSQL server:
//! submitting, leases and their epochs, fencing of a replaced worker,
//! cancelling.

use std::process::Command;
use std::time::Duration;

use tidewater_jobs::{
    Ending, Heartbeat, JobError, JobState, JobStore, NewJob, Owner, Report, Sample, StoreError,
    Submitted,
};

fn new_job(name: &str, key: Option<&str>) -> NewJob {
    NewJob {
        name: name.into(),
        state_url: "./state".into(),
        spec: "[job]\nname = \"x\"\n".into(),
        spec_path: Some("job.toml".into()),
        idempotency_key: key.map(str::to_string),
    }
}

fn other(pid: u32) -> Owner {
    Owner {
        host: "elsewhere".into(),
        pid,
    }
}

const TTL: Duration = Duration::from_secs(30);

/// The stores to test: a fresh SQLite file, and a fresh PostgreSQL
/// database when the test servers run.
async fn stores(name: &str) -> Vec<(String, Box<dyn JobStore>, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let sqlite = format!("sqlite://{}/jobs.sqlite", dir.path().display());
    out.push((
        "sqlite".to_string(),
        tidewater_jobs::open(&sqlite).await.unwrap(),
        dir,
    ));
    match std::env::var("TIDEWATER_PG_PRIMARY") {
        Ok(primary) => {
            let psql = |sql: String| {
                let ok = Command::new("psql")
                    .env("PGOPTIONS", "--client-min-messages=warning")
                    .args([primary.as_str(), "-XAtqc", &sql])
                    .status()
                    .expect("psql")
                    .success();
                assert!(ok, "{sql}");
            };
            psql(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            psql(format!("CREATE DATABASE {name}"));
            let (base, _) = primary.rsplit_once('/').unwrap();
            let url = format!("{base}/{name}");
            out.push((
                "postgres".to_string(),
                tidewater_jobs::open(&url).await.unwrap(),
                tempfile::tempdir().unwrap(),
            ));
        }
        Err(_) => assert!(
            std::env::var_os("TIDEWATER_REQUIRE_PG").is_none(),
            "TIDEWATER_REQUIRE_PG is set but TIDEWATER_PG_PRIMARY is not"
        ),
    }
    out
}

#[tokio::test]
async fn submitting_finds_the_same_job_by_key_and_by_name() {
    for (backend, store, _dir) in stores("tw_jobs_submit").await {
        let first = store.submit(new_job("a", Some("k1"))).await.unwrap();
        let Submitted::Created(job) = &first else {
            panic!("{backend}: {first:?}")
        };
        assert_eq!(job.state, JobState::Queued, "{backend}");
        let again = store
            .submit(new_job("other-name", Some("k1")))
            .await
            .unwrap();
        assert_eq!(again, Submitted::SameKey(job.clone()), "{backend}");
        let same = store.submit(new_job("a", None)).await.unwrap();
        assert_eq!(same, Submitted::Existing(job.clone()), "{backend}");
        let b = store.submit(new_job("b", None)).await.unwrap();
        assert!(matches!(b, Submitted::Created(_)), "{backend}");
        assert_eq!(store.find("a").await.unwrap().id, job.id, "{backend}");
        assert_eq!(store.find(&job.id.to_string()).await.unwrap().name, "a");
        let missing = store.find("nope").await.unwrap_err().to_string();
        assert!(missing.contains("no job 'nope'"), "{backend}: {missing}");
        assert_eq!(store.list(None).await.unwrap().len(), 2, "{backend}");
        let queued = store.list(Some(JobState::Queued)).await.unwrap();
        assert_eq!(queued.len(), 2, "{backend}");
        assert!(
            store
                .list(Some(JobState::Running))
                .await
                .unwrap()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn a_lease_is_refused_while_held_and_a_replaced_worker_is_fenced() {
    for (backend, store, _dir) in stores("tw_jobs_lease").await {
        let id = store.submit(new_job("a", None)).await.unwrap().job().id;
        let first = store
            .take_lease(id, &other(1), TTL, 0, false)
            .await
            .unwrap();
        assert_eq!(
            (first.state, first.epoch),
            (JobState::Running, 1),
            "{backend}"
        );
        assert_eq!(first.lease.as_ref().unwrap().owner, other(1));
        // Another process is refused, and told who holds it.
        let refused = store
            .take_lease(id, &other(2), TTL, 0, false)
            .await
            .unwrap_err();
        let text = refused.to_string();
        assert!(
            matches!(refused, StoreError::Held { .. }),
            "{backend}: {text}"
        );
        assert!(
            text.contains("pid 1 on elsewhere holds its lease"),
            "{text}"
        );
        // The epoch is past the state store's newest.
        let stolen = store.take_lease(id, &other(2), TTL, 7, true).await.unwrap();
        assert_eq!(stolen.epoch, 8, "{backend}");
        // The first worker learns it lost the job, and cannot end it.
        let report = Report {
            rows_done: 10,
            ..Report::default()
        };
        let beat = store
            .heartbeat(id, 1, &other(1), TTL, &report)
            .await
            .unwrap();
        let Heartbeat::Lost(why) = beat else {
            panic!("{backend}: {beat:?}")
        };
        assert!(why.contains("epoch 8 (pid 2 on elsewhere) took the job over from epoch 1"));
        let fenced = store.finish(id, 1, Ending::Succeeded, &report).await;
        assert!(
            matches!(fenced, Err(StoreError::Fenced { .. })),
            "{backend}: {fenced:?}"
        );
        // The holder renews, reports and ends it.
        let beat = store
            .heartbeat(id, 8, &other(2), TTL, &report)
            .await
            .unwrap();
        assert_eq!(beat, Heartbeat::Renewed { cancel: None }, "{backend}");
        assert_eq!(store.get(id).await.unwrap().progress.rows_done, 10);
        let done = store
            .finish(id, 8, Ending::Succeeded, &report)
            .await
            .unwrap();
        assert_eq!(done.state, JobState::Succeeded, "{backend}");
        assert!(done.lease.is_none(), "{backend}: the lease is released");
        // A succeeded job does not start again.
        let again = store
            .take_lease(id, &other(3), TTL, 0, false)
            .await
            .unwrap_err();
        assert!(
            again.to_string().contains("a SUCCEEDED job cannot start"),
            "{again}"
        );
    }
}

#[tokio::test]
async fn an_expired_lease_or_a_dead_process_here_is_taken_over() {
    for (backend, store, _dir) in stores("tw_jobs_expiry").await {
        let id = store.submit(new_job("a", None)).await.unwrap().job().id;
        store
            .take_lease(id, &other(1), Duration::from_millis(200), 0, false)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        let taken = store
            .take_lease(id, &other(2), TTL, 0, false)
            .await
            .unwrap();
        assert_eq!(taken.epoch, 2, "{backend}");
        // A process of this host that is gone gives its lease up at once.
        let mut child = Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let here = Owner::this_process();
        let dead = Owner {
            host: here.host.clone(),
            pid: child.id(),
        };
        let id = store.submit(new_job("b", None)).await.unwrap().job().id;
        store.take_lease(id, &dead, TTL, 0, false).await.unwrap();
        let taken = store.take_lease(id, &here, TTL, 0, false).await.unwrap();
        assert_eq!(taken.lease.unwrap().owner, here, "{backend}");
    }
}

#[tokio::test]
async fn a_cancel_reaches_the_worker_and_ends_the_job_cancelled() {
    for (backend, store, _dir) in stores("tw_jobs_cancel").await {
        let id = store.submit(new_job("a", None)).await.unwrap().job().id;
        let job = store
            .take_lease(id, &other(1), TTL, 0, false)
            .await
            .unwrap();
        let asked = store.cancel(id, true).await.unwrap();
        assert_eq!(asked.state, JobState::Cancelling, "{backend}");
        let beat = store
            .heartbeat(id, job.epoch, &other(1), TTL, &Report::default())
            .await
            .unwrap();
        assert_eq!(beat, Heartbeat::Renewed { cancel: Some(true) }, "{backend}");
        let ended = store
            .finish(id, job.epoch, Ending::Cancelled, &Report::default())
            .await
            .unwrap();
        assert_eq!(ended.state, JobState::Cancelled, "{backend}");
        // Resumed, then failed: the error is kept until the next start.
        let job = store
            .take_lease(id, &other(1), TTL, 0, false)
            .await
            .unwrap();
        let error = JobError {
            code: "bad_input".into(),
            message: "a row".into(),
            retryable: false,
        };
        let failed = store
            .finish(
                id,
                job.epoch,
                Ending::Failed(error.clone()),
                &Report::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            (failed.state, failed.error),
            (JobState::Failed, Some(error))
        );
        // A queued job is cancelled at once.
        let queued = store.submit(new_job("q", None)).await.unwrap().job().id;
        assert_eq!(
            store.cancel(queued, false).await.unwrap().state,
            JobState::Cancelled
        );
    }
}

#[tokio::test]
async fn reports_without_a_rate_and_then_with_one_are_all_recorded() {
    // The first heartbeats of a run have no rate yet; every later one has.
    // (sqlx 0.9's Any driver sends a NULL f64 to PostgreSQL typed as
    // float4, and a statement prepared so then refused every float8.)
    for (backend, store, _dir) in stores("tw_jobs_rates").await {
        let id = store.submit(new_job("rates", None)).await.unwrap().job().id;
        let job = store
            .take_lease(id, &other(1), TTL, 0, false)
            .await
            .unwrap();
        for beat in 0..24u32 {
            let rate = (beat >= 12).then_some(1000.0 + f64::from(beat));
            let report = Report {
                rows_done: u64::from(beat),
                rows_per_second: rate,
                eta_seconds: rate.map(|r| r / 100.0),
                ..Report::default()
            };
            let renewed = store
                .heartbeat(id, job.epoch, &other(1), TTL, &report)
                .await;
            assert!(
                matches!(renewed, Ok(Heartbeat::Renewed { .. })),
                "{backend}: heartbeat {beat}: {renewed:?}"
            );
            let progress = store.get(id).await.unwrap().progress;
            assert_eq!(
                (progress.rows_done, progress.rows_per_second),
                (u64::from(beat), rate)
            );
        }
    }
}

#[tokio::test]
async fn samples_are_kept_per_run_and_a_replaced_worker_records_none() {
    for (backend, store, _dir) in stores("tw_jobs_samples").await {
        let id = store
            .submit(new_job("samples", None))
            .await
            .unwrap()
            .job()
            .id;
        let first = store
            .take_lease(id, &other(1), TTL, 0, false)
            .await
            .unwrap();
        let sample = |epoch: u64, at_ms: i64, rows: u64| Sample {
            epoch,
            at_ms,
            rows_done: rows,
            rows_per_second: (rows > 0).then_some(rows as f64 / 2.0),
            exposure_rows: rows / 4,
            exposure_ms: 250,
            throttle: (rows == 20).then(|| "replica lag 3.0s > 2.0s".to_string()),
            replica_lag_ms: (rows >= 10).then_some(rows * 100),
            rows_dead_lettered: rows / 10,
            restored_from: (epoch > first.epoch).then_some(7),
            fallbacks: u64::from(epoch > first.epoch),
        };
        let mut expected = Vec::new();
        for (n, rows) in [0u64, 10, 20].into_iter().enumerate() {
            let s = sample(first.epoch, 1_000 + n as i64, rows);
            store.record_sample(id, &s).await.unwrap();
            expected.push(s);
        }
        // A successor takes over; the first worker's late sample is dropped.
        let second = store.take_lease(id, &other(2), TTL, 0, true).await.unwrap();
        store
            .record_sample(id, &sample(first.epoch, 2_000, 99))
            .await
            .unwrap();
        let s = sample(second.epoch, 3_000, 30);
        store.record_sample(id, &s).await.unwrap();
        expected.push(s);
        assert_eq!(store.samples(id, 100).await.unwrap(), expected, "{backend}");
        assert_eq!(
            store.samples(id, 2).await.unwrap(),
            expected[2..].to_vec(),
            "{backend}: the newest two, oldest first"
        );
    }
}
