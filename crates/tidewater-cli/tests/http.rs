//! The HTTP API, driven from outside as a user's scripts and Prometheus
//! drive it: `tidewater run --http` watched and cancelled over HTTP, its
//! metrics parsed by a Prometheus text parser and checked against the run's
//! summary; `tidewater serve --run` executing submitted specs once per
//! idempotency key and taking over the job of a killed worker; the token
//! that any address beyond loopback needs. With both job stores.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::process::Stdio;
use std::time::Duration;

use common::{assert_copy_output, signal, text, wait_or_kill};
use support::*;

/// This test's own job stores: a SQLite file (`serve --run` would run
/// the queued jobs of other tests in a shared one) and, when the test
/// servers run, a fresh PostgreSQL database.
fn own_stores(name: &str) -> Vec<String> {
    let path = std::env::temp_dir().join(format!(
        "tidewater-http-{name}-{}.sqlite",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let mut stores = vec![format!("sqlite://{}", path.display())];
    if let Some(db) = common::Db::fresh(name) {
        stores.push(db.url);
    }
    stores
}

/// Rows of the job the first test watches and cancels: 20 s at the
/// spec's 200k rows a second, room to cancel it on a loaded machine (at 1M
/// rows a CI run saw the job end before the cancel took).
const WATCHED_ROWS: u64 = 4_000_000;

/// A copy job named `name` of `rows` rows, held to 200k rows/s.
fn slow_copy(name: &str, rows: u64, folder: &Folder) -> String {
    copy_spec(rows, 100, &folder.s("state"), &folder.s("out"))
        .replace("name = \"copy\"", &format!("name = \"{name}\""))
        .replace(
            "batch_rows = 4096",
            "batch_rows = 4096\nrate_limit = 200_000",
        )
}

/// The sum of a metric's samples whose labels include `labels`.
fn metric(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value;
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(_) | Value::Summary(_) => 0.0,
        })
        .sum()
}

fn job_with_name<'a>(jobs: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    jobs["jobs"].as_array()?.iter().find(|j| j["name"] == name)
}

#[test]
fn the_api_follows_a_run_cancels_it_over_http_and_its_metrics_match_the_summary() {
    for (i, store) in own_stores("tw_http_run").iter().enumerate() {
        let store = store.as_str();
        let name = format!("watched-{i}");
        let folder = Folder::new();
        let spec = folder.write("job.toml", &slow_copy(&name, WATCHED_ROWS, &folder));
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let addr = format!("127.0.0.1:{port}");
        let summary = folder.s("summary.json");
        let args = [
            "--progress",
            "off",
            "--store",
            store,
            "--http",
            &addr,
            "--http-linger",
            "60s",
            "--summary-json",
            &summary,
        ];
        let mut child = spawn_run(&spec, &args);

        let listed = poll(
            &format!("{base}/api/v1/jobs"),
            "listing the job, running",
            |a| {
                a.status == 200
                    && job_with_name(&a.json(), &name).is_some_and(|j| {
                        j["state"] == "RUNNING" && j["progress"]["done"].as_u64() > Some(0)
                    })
            },
        );
        let id = job_with_name(&listed.json(), &name).unwrap()["id"]
            .as_i64()
            .unwrap();
        let job_url = format!("{base}/api/v1/jobs/{id}");
        let running = poll(&job_url, "past a recorded checkpoint", |a| {
            let j = a.json();
            j["last_checkpoint"]["id"].as_u64() > Some(0) && j["last_checkpoint"]["bytes"].is_u64()
        });
        assert_eq!(running.header("retry-after"), Some("2"), "{running:?}");
        let job = running.json();
        assert_eq!(job["progress"]["total"], WATCHED_ROWS, "{job}");
        let owner = job["lease"]["owner"].as_str().unwrap();
        assert!(
            owner.starts_with(&format!("pid {} on ", child.id())),
            "{job}"
        );
        assert!(job["lease"]["epoch"].as_u64() >= Some(1), "{job}");
        assert!(job["rows_per_second"].as_f64() > Some(0.0), "{job}");

        let checkpoints = http(&format!("{job_url}/checkpoints"), &[], None).unwrap();
        assert_eq!(checkpoints.status, 200, "{checkpoints:?}");
        let list = checkpoints.json()["checkpoints"]
            .as_array()
            .unwrap()
            .clone();
        assert!(!list.is_empty(), "{checkpoints:?}");
        for c in &list {
            for field in [
                "align_ms",
                "snapshot_ms",
                "upload_ms",
                "manifest_ms",
                "commit_ms",
                "bytes",
                "duration_ms",
            ] {
                assert!(c[field].is_u64(), "{field} in {c}");
            }
            assert_eq!(c["kind"], "periodic", "{c}");
        }

        // Cancelled from this process over HTTP: a savepoint, then CANCELLED.
        let cancel = http(&format!("{job_url}/cancel"), &[], Some("")).unwrap();
        assert_eq!(cancel.status, 202, "{cancel:?}");
        assert_eq!(
            cancel.header("location"),
            Some(format!("/api/v1/jobs/{id}").as_str())
        );
        assert_eq!(cancel.json()["state"], "CANCELLING", "{cancel:?}");
        let cancelled = poll(&job_url, "cancelled", |a| a.json()["state"] == "CANCELLED");
        assert_eq!(cancelled.header("retry-after"), None, "{cancelled:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !folder.path("summary.json").exists() {
            assert!(std::time::Instant::now() < deadline, "no summary");
            std::thread::sleep(Duration::from_millis(50));
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(folder.path("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["outcome"], "cancelled", "{summary}");

        // The lingering API's metrics, as Prometheus reads them, against the summary.
        let scraped = http(&format!("{base}/metrics"), &[], None).unwrap();
        assert_eq!(scraped.status, 200);
        assert!(
            scraped
                .header("content-type")
                .unwrap()
                .starts_with("text/plain")
        );
        let scrape =
            prometheus_parse::Scrape::parse(scraped.body.lines().map(|l| Ok(l.to_string())))
                .expect("Prometheus text");
        let job_label = ("job", name.as_str());
        let read = summary["rows_read_in_run"].as_f64().unwrap();
        let written = summary["rows_written_in_run"].as_f64().unwrap();
        assert!(read > 0.0 && written > 0.0 && written < read, "{summary}");
        let counted = [
            ("tidewater_operator_rows_out_total", "gen", read),
            ("tidewater_operator_rows_in_total", "keep", read),
            ("tidewater_operator_rows_out_total", "keep", written),
            ("tidewater_operator_rows_in_total", "out", written),
        ];
        for (name, uid, expected) in counted {
            assert_eq!(
                metric(&scrape, name, &[job_label, ("uid", uid)]),
                expected,
                "{name} {uid}"
            );
        }
        let taken = summary["checkpoints"].as_array().unwrap().len() as f64;
        assert_eq!(
            metric(
                &scrape,
                "tidewater_checkpoints_completed_total",
                &[job_label]
            ),
            taken
        );
        assert_eq!(
            metric(
                &scrape,
                "tidewater_checkpoint_duration_seconds_count",
                &[job_label]
            ),
            taken
        );
        assert_eq!(
            metric(
                &scrape,
                "tidewater_checkpoint_phase_seconds_count",
                &[job_label, ("phase", "upload")]
            ),
            taken
        );
        assert!(metric(&scrape, "tidewater_lease_renewals_total", &[]) >= 1.0);
        let done = cancelled.json()["progress"]["done"].as_f64().unwrap();
        assert_eq!(
            metric(
                &scrape,
                "tidewater_job_rows_done",
                &[job_label, ("id", &id.to_string())]
            ),
            done
        );
        assert_eq!(metric(&scrape, "tidewater_job_running", &[job_label]), 0.0);

        signal(&child, "TERM");
        wait_or_kill(&mut child, Duration::from_secs(30)).expect("the linger ends on SIGTERM");
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", text(&output));

        let resumed = tidewater()
            .args(["resume", &name, "--progress", "off", "--store", store])
            .output()
            .unwrap();
        assert!(resumed.status.success(), "{}", text(&resumed));
        assert_copy_output(&folder.path("out"), WATCHED_ROWS, 100);
        assert_history_of_two_runs(store, id, &summary);
    }
}

/// The job of the first test over time, as the dashboard reads it from a
/// `tidewater serve` of its store: two runs, the second resumed from the
/// first's savepoint and ending with every row; samples in order; the
/// interval estimate built on the spec's 50 ms interval.
fn assert_history_of_two_runs(store: &str, id: i64, summary: &serde_json::Value) {
    let port = free_port();
    let server = serve(store, port, &[]);
    let base = format!("http://127.0.0.1:{port}/api/v1");
    poll(&format!("{base}/server"), "serving", |a| a.status == 200);
    let about = http(&format!("{base}/server"), &[], None).unwrap().json();
    assert_eq!(about["changes_need_token"], false, "{about}");

    let history = http(&format!("{base}/jobs/{id}/history"), &[], None)
        .unwrap()
        .json();
    let runs = history["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{history}");
    assert!(runs[0]["restored_from"].is_null(), "{history}");
    assert_eq!(runs[0]["fallbacks"], 0, "{history}");
    let savepoint = summary["checkpoints"].as_array().unwrap().last().unwrap();
    assert_eq!(savepoint["kind"], "savepoint", "{summary}");
    assert_eq!(runs[1]["restored_from"], savepoint["id"], "{history}");
    assert!(
        runs[1]["epoch"].as_u64() > runs[0]["epoch"].as_u64(),
        "{history}"
    );
    assert_eq!(runs[1]["rows_at_end"], WATCHED_ROWS, "{history}");
    let samples = history["samples"].as_array().unwrap();
    for pair in samples.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a["at_ms"].as_i64() < b["at_ms"].as_i64(), "{a} then {b}");
        if a["epoch"] == b["epoch"] {
            assert!(
                a["rows_done"].as_u64() <= b["rows_done"].as_u64(),
                "{a} then {b}"
            );
        }
    }
    assert!(
        samples.iter().any(|s| s["throttle"]
            .as_str()
            .is_some_and(|t| t.contains("rate limit"))),
        "the 200k rows/s limit is in some sample: {history}"
    );

    let estimate = http(&format!("{base}/jobs/{id}/intervals"), &[], None)
        .unwrap()
        .json();
    let observed = estimate["observed_interval_seconds"].as_f64().unwrap();
    assert!((0.04..1.0).contains(&observed), "{estimate}");
    let current: Vec<_> = estimate["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["current"] == true)
        .collect();
    assert_eq!(current.len(), 1, "{estimate}");
    assert_eq!(current[0]["interval_seconds"].as_f64(), Some(observed));

    let missing = http(&format!("{base}/jobs/999999/history"), &[], None).unwrap();
    assert_eq!(missing.status, 404, "{missing:?}");
    let bad = http(&format!("{base}/jobs/{id}/history?limit=0"), &[], None).unwrap();
    assert_eq!(
        (bad.status, bad.json()["code"].as_str()),
        (400, Some("bad_limit"))
    );
    stop(server);
}

/// `tidewater serve` on `port` over `store`, with `args`.
fn serve(store: &str, port: u16, args: &[&str]) -> std::process::Child {
    tidewater()
        .args([
            "serve",
            "--store",
            store,
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tidewater serve")
}

fn stop(mut server: std::process::Child) -> String {
    signal(&server, "TERM");
    wait_or_kill(&mut server, Duration::from_secs(60)).expect("serve stops on SIGTERM");
    let output = server.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    text(&output)
}

#[test]
fn serve_runs_a_submitted_spec_once_per_key_and_takes_over_a_killed_workers_job() {
    for (i, store) in own_stores("tw_http_serve").iter().enumerate() {
        let store = store.as_str();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let jobs = format!("{base}/api/v1/jobs");
        let server = serve(
            store,
            port,
            &["--run", "1", "--lease-ttl", "2s", "--poll", "200ms"],
        );
        poll(&format!("{base}/api/v1/openapi.json"), "serving", |a| {
            a.status == 200
        });

        // A spec that does not validate: 400, each problem at its line.
        let broken = "[job]\nname = \"broken\"\n\n[sources.gen]\ntype = \"generatr\"\n";
        let refused = http(&jobs, &[], Some(broken)).unwrap();
        assert_eq!(refused.status, 400, "{refused:?}");
        let body = refused.json();
        assert_eq!(body["code"], "invalid_spec", "{body}");
        let problems = body["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["line"] == 5 && p["message"].as_str().unwrap().contains("\"generatr\"")),
            "{body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("submitted.toml:5:"),
            "{body}"
        );

        // The same key twice: one job.
        let folder = Folder::new();
        let name = format!("served-{i}");
        let spec = copy_spec(300_000, 50, &folder.s("state"), &folder.s("out"))
            .replace("name = \"copy\"", &format!("name = \"{name}\""));
        let key = [("Idempotency-Key", "backfill-2026-12-01")];
        let first = http(&jobs, &key, Some(&spec)).unwrap();
        assert_eq!(first.status, 202, "{first:?}");
        let id = first.json()["id"].as_i64().unwrap();
        assert_eq!(
            first.header("location"),
            Some(format!("/api/v1/jobs/{id}").as_str())
        );
        assert!(first.header("retry-after").is_some(), "{first:?}");
        let again = http(&jobs, &key, Some(&spec)).unwrap();
        assert_eq!(
            (again.status, again.json()["id"].as_i64()),
            (202, Some(id)),
            "{again:?}"
        );
        let job_url = format!("{base}/api/v1/jobs/{id}");
        let done = poll(&job_url, "succeeded", |a| a.json()["state"] == "SUCCEEDED");
        assert_eq!(done.json()["progress"]["done"], 300_000, "{done:?}");
        assert_copy_output(&folder.path("out"), 300_000, 50);
        let listed = http(&jobs, &[], None).unwrap().json();
        let served = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["name"] == name)
            .count();
        assert_eq!(served, 1, "{listed}");
        let checkpoints = http(&format!("{job_url}/checkpoints"), &[], None)
            .unwrap()
            .json();
        let last = checkpoints["checkpoints"]
            .as_array()
            .unwrap()
            .last()
            .cloned()
            .unwrap();
        assert_eq!(last["kind"], "final", "{checkpoints}");

        // A worker killed with SIGKILL: once its lease ran out, serve resumes the job.
        let orphan_folder = Folder::new();
        let orphan = format!("orphan-{i}");
        let spec = orphan_folder.write("job.toml", &slow_copy(&orphan, 1_000_000, &orphan_folder));
        let mut worker = spawn_run(
            &spec,
            &["--progress", "off", "--store", store, "--lease-ttl", "2s"],
        );
        let running = wait_for_status(&orphan, store, "past its first checkpoint", |s| {
            s["progress"]["last_checkpoint"].as_u64() > Some(0)
        });
        worker.kill().unwrap();
        worker.wait().unwrap();
        let epoch = running["epoch"].as_u64().unwrap();
        let orphan_url = format!("{base}/api/v1/jobs/{}", running["id"]);
        let done = poll(&orphan_url, "taken over and succeeded", |a| {
            a.json()["state"] == "SUCCEEDED"
        });
        assert!(done.json()["epoch"].as_u64() > Some(epoch), "{done:?}");
        assert_copy_output(&orphan_folder.path("out"), 1_000_000, 100);
        let late = http(&format!("{job_url}/cancel"), &[], Some("")).unwrap();
        assert_eq!(
            (late.status, late.json()["code"].as_str()),
            (409, Some("illegal_transition"))
        );
        let said = stop(server);
        assert!(
            said.contains(&format!("started a worker for job {}", running["id"])),
            "{said}"
        );
    }
}

#[test]
fn beyond_loopback_the_api_needs_its_token_for_changes() {
    let store = own_stores("tw_http_token").remove(0);
    let folder = Folder::new();
    let port = free_port();
    let open_addr = format!("0.0.0.0:{port}");
    let refused = tidewater()
        .args(["serve", "--store", &store, "--http", &open_addr])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        stderr(&refused).contains("give --http-token"),
        "{}",
        text(&refused)
    );
    let spec = folder.write(
        "job.toml",
        &copy_spec(1000, 10, &folder.s("state"), &folder.s("out")),
    );
    let refused = run(&spec, &["--store", &store, "--http", &open_addr]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(!folder.path("out").exists(), "the job ran");

    let token = "a-test-token-of-32-characters-00";
    let mut server = tidewater()
        .args(["serve", "--store", &store, "--http", &open_addr])
        .env("TIDEWATER_HTTP_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let jobs = format!("{base}/api/v1/jobs");
    poll(&jobs, "serving", |a| a.status == 200);
    let body = std::fs::read_to_string(&spec).unwrap();
    let bearer = format!("Bearer {token}");
    let unauthorized: [&[(&str, &str)]; 3] = [
        &[],
        &[("Authorization", "Bearer not-the-token-of-32-characters")],
        &[("Authorization", token)],
    ];
    for headers in unauthorized {
        let answer = http(&jobs, headers, Some(&body)).unwrap();
        assert_eq!(answer.status, 401, "{headers:?}: {answer:?}");
        assert_eq!(answer.json()["code"], "unauthorized");
        assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
    }
    assert!(
        http(&jobs, &[], None).unwrap().json()["jobs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let about = http(&format!("{base}/api/v1/server"), &[], None).unwrap();
    assert_eq!(about.json()["changes_need_token"], true, "{about:?}");
    let submitted = http(&jobs, &[("Authorization", &bearer)], Some(&body)).unwrap();
    assert_eq!(submitted.status, 202, "{submitted:?}");
    assert_eq!(submitted.json()["state"], "QUEUED");
    let id = submitted.json()["id"].as_i64().unwrap();
    let job_url = format!("{base}/api/v1/jobs/{id}");
    assert_eq!(
        http(&job_url, &[], None).unwrap().status,
        200,
        "reads need no token"
    );
    let cancel = format!("{job_url}/cancel");
    assert_eq!(http(&cancel, &[], Some("")).unwrap().status, 401);
    assert_eq!(http(&job_url, &[], None).unwrap().json()["state"], "QUEUED");
    let cancelled = http(&cancel, &[("Authorization", &bearer)], Some("")).unwrap();
    assert_eq!(cancelled.status, 202, "{cancelled:?}");
    assert_eq!(
        cancelled.json()["state"],
        "CANCELLED",
        "a queued job is cancelled at once"
    );
    let again = http(&cancel, &[("Authorization", &bearer)], Some("")).unwrap();
    assert_eq!(
        (again.status, again.json()["state"].as_str()),
        (202, Some("CANCELLED"))
    );
    let missing = http(&format!("{base}/api/v1/jobs/999999"), &[], None).unwrap();
    assert_eq!(
        (missing.status, missing.json()["code"].as_str()),
        (404, Some("not_found"))
    );
    signal(&server, "TERM");
    wait_or_kill(&mut server, Duration::from_secs(30)).expect("serve stops");
}
