//! What the binary's test files share: the test job store, the command,
//! the backfill example's jobs as specs, temporary folders, and waiting
//! for a job's status.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{self, Rng, kill_randomly_until_complete, signal, text, wait_or_kill};

/// The job store these tests' runs share: one SQLite file per test binary
/// run (jobs are told apart by their state folders, each test's own).
pub fn test_store() -> String {
    let path =
        std::env::temp_dir().join(format!("tidewater-cli-tests-{}.sqlite", std::process::id()));
    format!("sqlite://{}", path.display())
}

pub fn tidewater() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidewater"));
    // The lease's renewals (debug) are logged too: a run that loses its
    // lease shows how late each renewal woke and how long the store took.
    command
        .env("RUST_LOG", "info,tidewater_cli::events=debug")
        .env("NO_COLOR", "1")
        .env("TIDEWATER_STORE", test_store())
        .stdin(Stdio::null());
    command
}

/// The copy job of the backfill example, as a spec.
pub fn copy_spec(rows: u64, keys: u64, state: &str, out: &str) -> String {
    spec_with(
        "copy",
        rows,
        keys,
        state,
        out,
        r#"[transforms.keep]
inputs = ["gen"]
type = "sql"
filter = "id % 3 <> 0"
columns = { w = "v * 2.0" }"#,
        "keep",
    )
}

/// The aggregate job of the backfill example, as a spec.
pub fn aggregate_spec(rows: u64, keys: u64, state: &str, out: &str) -> String {
    spec_with(
        "aggregate",
        rows,
        keys,
        state,
        out,
        r#"[transforms.per_key]
inputs = ["gen"]
type = "aggregate"
key_by = ["k"]
aggregates = { count = "count(*)", sum_v = "sum(v)", max_id = "max(id)" }"#,
        "per_key",
    )
}

/// A generator, `transform` (a table read by `last`), a Parquet sink.
pub fn spec_with(
    name: &str,
    rows: u64,
    keys: u64,
    state: &str,
    out: &str,
    transform: &str,
    last: &str,
) -> String {
    format!(
        r#"
[job]
name = "{name}"
state = "{state}"
checkpoint_interval = "50ms"
parallelism = 2

[sources.gen]
type = "generator"
rows = {rows}
keys = {keys}
batch_rows = 4096

{transform}

[sinks.out]
inputs = ["{last}"]
type = "parquet"
path = "{out}"
"#
    )
}

pub struct Folder {
    _dir: tempfile::TempDir,
    /// The folder.
    pub root: PathBuf,
}

impl Folder {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_path_buf();
        Folder { _dir: dir, root }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("writing the spec");
        path
    }
}

pub fn run(spec: &Path, args: &[&str]) -> Output {
    tidewater()
        .arg("run")
        .arg(spec)
        .args(args)
        .output()
        .expect("running tidewater")
}

/// Starts `tidewater run SPEC ARGS...` with its output captured.
pub fn spawn_run(spec: &Path, args: &[&str]) -> std::process::Child {
    tidewater()
        .arg("run")
        .arg(spec)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tidewater run")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `tidewater status JOB --json`, parsed; `None` while the store has no
/// such job yet.
pub fn status_of(job: &str, store: &str) -> Option<serde_json::Value> {
    let output = tidewater()
        .args(["status", job, "--json", "--store", store])
        .output()
        .unwrap();
    if stderr(&output).contains("no job '") {
        return None;
    }
    assert!(output.status.success(), "{}", text(&output));
    Some(
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&output))),
    )
}

/// Waits until `check` holds of the job's status.
pub fn wait_for_status(
    job: &str,
    store: &str,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let status = status_of(job, store);
        if let Some(status) = status.as_ref().filter(|s| check(s)) {
            return status.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {what}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status of a job that exists.
pub fn status(job: &str, store: &str) -> serde_json::Value {
    status_of(job, store).unwrap_or_else(|| panic!("no job '{job}' in {store}"))
}

/// The job stores to test: this binary's SQLite file, and a fresh
/// PostgreSQL database when the test servers run.
pub fn job_stores(name: &str) -> Vec<String> {
    let mut stores = vec![test_store()];
    if let Some(db) = common::Db::fresh(name) {
        stores.push(db.url);
    }
    stores
}

/// A free loopback port (free when asked: the server that takes it binds
/// it a moment later).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// An HTTP answer: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The headers, by lower-case name.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body.
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Sends a request (`body` makes it a POST) with `headers`; any status is an answer.
pub fn http(url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Result<Answer, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let response = match body {
        Some(body) => {
            let mut request = agent.post(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.send(body)
        }
        None => {
            let mut request = agent.get(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            request.call()
        }
    };
    let mut response = response.map_err(|e| e.to_string())?;
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok(Answer {
        status: response.status().as_u16(),
        headers,
        body,
    })
}

/// GETs `url` until the server answers and `check` holds of the answer.
pub fn poll(url: &str, what: &str, check: impl Fn(&Answer) -> bool) -> Answer {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answer = match http(url, &[], None) {
            Ok(answer) if check(&answer) => return answer,
            other => other,
        };
        assert!(
            std::time::Instant::now() < deadline,
            "never {what}: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs specs that `write` puts in fresh folders, each killed with SIGKILL
/// at random instants and rerun until it completes, until `kills` kills
/// were made (a run can finish before its kill; each kill comes within
/// `max_delay` of its run's start); `check` judges each
/// folder's output, and a further run must say it is already complete.
pub fn killed_at_random_instants(
    what: &str,
    kills: usize,
    max_delay: Duration,
    write: impl Fn(&Folder) -> String,
    check: impl Fn(&Folder),
) {
    let mut rng = Rng::from_time();
    let (mut made_so_far, mut rounds) = (0, 0);
    while made_so_far < kills {
        rounds += 1;
        let folder = Folder::new();
        let spec = folder.write("job.toml", &write(&folder));
        let (output, made) = kill_randomly_until_complete(
            || {
                let mut c = tidewater();
                c.arg("run").arg(&spec);
                c
            },
            kills - made_so_far,
            max_delay,
            &mut rng,
            || {},
        );
        made_so_far += made;
        assert!(
            output.status.success(),
            "{what}: final run failed:\n{}",
            text(&output)
        );
        eprintln!("{what}: round {rounds} completed after {made} kills");
        check(&folder);
        let again = run(&spec, &[]);
        assert!(again.status.success(), "{}", text(&again));
        assert!(
            String::from_utf8_lossy(&again.stdout).contains("already complete"),
            "{}",
            text(&again)
        );
    }
}

/// One fencing trial: a run of `spec` (job `name`) is stopped with SIGSTOP
/// at a random instant; a second run is refused while the first's 4 s lease
/// lives and takes over once it ran out; after a random while the first is
/// woken, so both are alive. The second must finish; the first must stop
/// without committing (fenced, its lease lost, or refused before it held
/// one). Returns what the woken run said, or `None` when the first run
/// finished before its pause (no trial).
pub fn paused_takeover_trial(
    name: &str,
    spec: &Path,
    store: &str,
    rng: &mut Rng,
) -> Option<String> {
    let args = ["--lease-ttl", "4s", "--progress", "off", "--store", store];
    let spawn = || spawn_run(spec, &args);
    let mut first = spawn();
    std::thread::sleep(Duration::from_millis(100 + rng.below(3000)));
    signal(&first, "STOP");
    if first.try_wait().unwrap().is_some() {
        return None;
    }
    let epoch_now = || status_of(name, store).map_or(0, |s| s["epoch"].as_u64().unwrap_or(0));
    let stopped_at = epoch_now();
    // A 4 s lease is taken over within seconds; a takeover that has not
    // happened after minutes is a hang, reported instead of waited out.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let mut second = loop {
        let mut attempt = spawn();
        let taken = loop {
            if let Some(code) = attempt.try_wait().unwrap() {
                break code.code() != Some(1);
            }
            if epoch_now() > stopped_at {
                break true;
            }
            if std::time::Instant::now() > deadline {
                let _ = first.kill();
                let _ = attempt.kill();
                let stuck = attempt.wait_with_output().unwrap();
                panic!(
                    "{name}: no run took the paused worker's lease over in 3 minutes; \
                     the last attempt said:\n{}",
                    text(&stuck)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if taken {
            break attempt;
        }
        let refused = attempt.wait_with_output().unwrap();
        assert!(
            stderr(&refused).contains("holds its lease"),
            "{}",
            text(&refused)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(rng.below(800)));
    signal(&first, "CONT");
    wait_or_kill(&mut second, Duration::from_secs(120)).expect("the second run ends");
    let second = second.wait_with_output().unwrap();
    assert!(
        second.status.success(),
        "{name}: the second run failed:\n{}",
        text(&second)
    );
    wait_or_kill(&mut first, Duration::from_secs(120)).expect("the woken run ends");
    let woken = first.wait_with_output().unwrap();
    let said = text(&woken);
    let stopped = [
        "lost the lease on job",
        "fenced: this worker holds epoch",
        "holds its lease",
    ];
    assert!(
        woken.status.code() == Some(1) && stopped.iter().any(|s| said.contains(s)),
        "{name}: the woken run did not stop fenced:\n{said}"
    );
    Some(said)
}
