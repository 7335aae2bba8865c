//! Shared helpers of the end-to-end tests: run the backfill example as a child
//! process, and compute its exact expected output from the generator spec.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tidewater_core::splitmix64;

/// The backfill example, built with the test's own profile.
pub fn backfill_binary() -> PathBuf {
    example_binary("backfill")
}

/// An example, built once per test binary with the test's own profile, so a
/// test never runs a stale example (`cargo test --test X` alone does not
/// rebuild examples). Built with the selection of the suite's `cargo test
/// --workspace --all-features`, whose example it then is: a narrower
/// `cargo build --example` resolves other features and compiles most
/// dependencies again.
pub fn example_binary(name: &'static str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(&'static str, PathBuf)>> =
        std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| *n == name) {
        return path.clone();
    }
    let path = {
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "--workspace",
            "--all-features",
            "--example",
            name,
        ]);
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let status = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo build --example");
        assert!(status.success(), "building the {name} example failed");
        profile_dir.join("examples").join(name)
    };
    built.push((name, path.clone()));
    path
}

/// One run's folders and flags.
#[derive(Debug, Clone)]
pub struct Backfill {
    pub mode: &'static str,
    pub rows: u64,
    pub keys: u64,
    pub parallelism: usize,
    pub interval: &'static str,
    pub state: PathBuf,
    pub out: PathBuf,
    /// `--target-file-size`, when not the default.
    pub target_file_size: Option<&'static str>,
    /// More flags (e.g. `--incremental`).
    pub extra: Vec<String>,
}

impl Backfill {
    pub fn new(dir: &Path, mode: &'static str, rows: u64, keys: u64) -> Self {
        Backfill {
            mode,
            rows,
            keys,
            parallelism: 2,
            interval: "100ms",
            state: dir.join("state"),
            out: dir.join("out"),
            target_file_size: None,
            extra: Vec::new(),
        }
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(backfill_binary());
        command
            .arg("--mode")
            .arg(self.mode)
            .arg("--rows")
            .arg(self.rows.to_string())
            .arg("--keys")
            .arg(self.keys.to_string())
            .arg("--parallelism")
            .arg(self.parallelism.to_string())
            .arg("--checkpoint-interval")
            .arg(self.interval)
            .arg("--state")
            .arg(&self.state)
            .arg("--out")
            .arg(&self.out)
            .args(
                self.target_file_size
                    .map(|size| format!("--target-file-size={size}")),
            )
            .args(&self.extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    pub fn spawn(&self) -> Child {
        self.command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the backfill example")
    }

    pub fn run(&self) -> Output {
        self.command()
            .output()
            .expect("running the backfill example")
    }

    /// Runs with the failpoint `point` armed at checkpoint `checkpoint`
    /// (`TIDEWATER_FAILPOINT`) and asserts that it fired: the run failed
    /// and said so.
    pub fn crash_at_failpoint(&self, point: &str, checkpoint: u64) {
        let crashed = self
            .command()
            .env("TIDEWATER_FAILPOINT", format!("{point}@{checkpoint}"))
            .output()
            .expect("run with failpoint");
        assert!(
            !crashed.status.success()
                && String::from_utf8_lossy(&crashed.stderr).contains("failpoint"),
            "the failpoint {point}@{checkpoint} did not fire:\n{}",
            text(&crashed)
        );
    }

    /// Runs to the end with `--summary-json`; returns the output and the
    /// summary (the run must have succeeded).
    pub fn run_with_summary(&self) -> (Output, serde_json::Value) {
        let path = self.state.with_file_name("summary.json");
        let output = self
            .command()
            .arg("--summary-json")
            .arg(&path)
            .output()
            .expect("running the backfill example");
        assert!(output.status.success(), "{}", text(&output));
        let summary = std::fs::read(&path).expect("the run's summary");
        (
            output,
            serde_json::from_slice(&summary).expect("summary JSON"),
        )
    }

    /// Completed checkpoints (those with a manifest) in the state folder.
    pub fn manifests(&self) -> Vec<PathBuf> {
        let job = self.state.join("backfill");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&job)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path().join("_MANIFEST.json"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }

    /// Waits until at least `n` manifests exist (or the child exits).
    pub fn wait_for_manifests(&self, child: &mut Child, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.manifests().len() >= n {
                return true;
            }
            if child.try_wait().expect("polling the child").is_some() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// The name of checkpoint `id`'s folder under the job's state folder.
pub fn checkpoint_folder(id: u64) -> String {
    format!("chk-{id:020}")
}

/// The id of the checkpoint whose `_MANIFEST.json` is at `manifest`.
pub fn checkpoint_id(manifest: &Path) -> u64 {
    manifest
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("chk-"))
        .and_then(|n| n.parse().ok())
        .expect("a checkpoint folder name")
}

pub fn text(output: &Output) -> String {
    format!(
        "exit: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every committed output batch: the `*.parquet` files directly under `out`.
pub fn read_output(out: &Path) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return batches;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "parquet") && path.is_file() {
            let file = File::open(&path).expect("open output file");
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap_or_else(|e| panic!("{} is not valid Parquet: {e}", path.display()))
                .build()
                .expect("parquet reader");
            for batch in reader {
                batches.push(batch.expect("parquet batch"));
            }
        }
    }
    batches
}

fn column<'a, T: arrow::datatypes::ArrowPrimitiveType>(
    batch: &'a RecordBatch,
    name: &str,
) -> &'a arrow::array::PrimitiveArray<T> {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("output has no column '{name}'"))
        .as_primitive::<T>()
}

/// Asserts the copy-mode output is exactly rows `id % 3 != 0` of the spec, each once.
pub fn assert_copy_output(out: &Path, rows: u64, keys: u64) {
    let batches = read_output(out);
    let mut ids = Vec::new();
    for batch in &batches {
        let names: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["id", "k", "v", "s", "w"], "output columns");
        let id = column::<Int64Type>(batch, "id");
        let k = column::<Int64Type>(batch, "k");
        let v = column::<Float64Type>(batch, "v");
        let w = column::<Float64Type>(batch, "w");
        let s = batch.column_by_name("s").expect("s").as_string::<i32>();
        for row in 0..batch.num_rows() {
            let i = id.value(row) as u64;
            let h = splitmix64(i);
            assert_eq!(k.value(row), (h % keys) as i64, "k of row {i}");
            assert_eq!(v.value(row), (i % 1000) as f64 / 4.0, "v of row {i}");
            assert_eq!(w.value(row), 2.0 * v.value(row), "w of row {i}");
            assert_eq!(s.value(row), format!("{h:016x}"), "s of row {i}");
            ids.push(i);
        }
    }
    ids.sort_unstable();
    let expected: Vec<u64> = (0..rows).filter(|i| i % 3 != 0).collect();
    if ids != expected {
        let mut dups = ids.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]);
        let set: std::collections::HashSet<u64> = ids.iter().copied().collect();
        let missing = expected.iter().find(|i| !set.contains(i));
        panic!(
            "copy output differs: {} rows, expected {}; first duplicate {:?}, first missing {:?}",
            ids.len(),
            expected.len(),
            dups.next(),
            missing
        );
    }
}

/// Per key: (count, sum(v), max(id)) over the generator's rows, the key of
/// row `i` being `key_of(i)`: the oracle of every aggregate test.
pub fn expected_aggregate<K: std::hash::Hash + Eq>(
    rows: u64,
    key_of: impl Fn(u64) -> K,
) -> HashMap<K, (i64, f64, i64)> {
    let mut expected: HashMap<K, (i64, f64, i64)> = HashMap::new();
    for i in 0..rows {
        let entry = expected.entry(key_of(i)).or_insert((0, 0.0, i64::MIN));
        entry.0 += 1;
        entry.1 += (i % 1000) as f64 / 4.0;
        entry.2 = entry.2.max(i as i64);
    }
    expected
}

/// Asserts that `out` holds exactly one row per key of `expected`, with its
/// (count, sum_v, max_id); `key` reads a row's key.
pub fn assert_groups<K: std::hash::Hash + Eq + std::fmt::Debug>(
    out: &Path,
    expected: &HashMap<K, (i64, f64, i64)>,
    key_column: &str,
    key: impl Fn(&RecordBatch, usize) -> K,
) {
    let mut seen: HashMap<K, (i64, f64, i64)> = HashMap::new();
    for batch in read_output(out) {
        let names: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [key_column, "count", "sum_v", "max_id"],
            "output columns"
        );
        let count = column::<Int64Type>(&batch, "count");
        let sum = column::<Float64Type>(&batch, "sum_v");
        let max = column::<Int64Type>(&batch, "max_id");
        for row in 0..batch.num_rows() {
            let k = key(&batch, row);
            let value = (count.value(row), sum.value(row), max.value(row));
            if let Some(previous) = seen.insert(k, value) {
                panic!(
                    "key {:?} appears twice in the output ({previous:?} and {value:?})",
                    key(&batch, row)
                );
            }
        }
    }
    assert_eq!(seen.len(), expected.len(), "number of keys in the output");
    for (k, want) in expected {
        let got = seen
            .get(k)
            .unwrap_or_else(|| panic!("key {k:?} is missing"));
        assert_eq!(got, want, "key {k:?}: (count, sum_v, max_id)");
    }
}

/// Asserts the aggregate output is exactly one row per key with the spec's count, sum(v), max(id).
pub fn assert_aggregate_output(out: &Path, rows: u64, keys: u64) {
    let expected = expected_aggregate(rows, |i| (splitmix64(i) % keys) as i64);
    assert_groups(out, &expected, "k", |batch, row| {
        column::<Int64Type>(batch, "k").value(row)
    });
}

/// Runs `command()` and SIGKILLs it at a random instant below `max_delay`,
/// up to `budget` times, calling `after_kill` after each kill; once the budget
/// is spent, lets a run complete. Returns that run's output (or that of a run
/// that completed before its kill) and the kills made.
pub fn kill_randomly_until_complete(
    command: impl Fn() -> Command,
    budget: usize,
    max_delay: Duration,
    rng: &mut Rng,
    mut after_kill: impl FnMut(),
) -> (Output, usize) {
    let mut kills = 0;
    while kills < budget {
        let mut child = command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning the job");
        let started = Instant::now();
        let delay = Duration::from_millis(rng.below(max_delay.as_millis() as u64));
        let killed = loop {
            if child.try_wait().expect("poll child").is_some() {
                break false;
            }
            if started.elapsed() >= delay {
                child.kill().expect("SIGKILL");
                break true;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let output = child.wait_with_output().expect("wait for child");
        if !killed {
            return (output, kills);
        }
        kills += 1;
        after_kill();
    }
    (command().output().expect("running the job"), kills)
}

/// A small deterministic random stream (splitmix64 over a counter).
pub struct Rng(u64);

impl Rng {
    pub fn from_time() -> Self {
        let seed = std::env::var("TIDEWATER_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_nanos() as u64
            });
        eprintln!("random seed: {seed} (set TIDEWATER_TEST_SEED={seed} to repeat)");
        Rng(seed)
    }

    /// A stream from `seed` (for one of several threads).
    pub fn from_seed(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix64(self.0) % n.max(1)
    }
}

/// Sends signal `name` (STOP, CONT, ...) to `child`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(child.id().to_string())
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -{name} failed");
}

/// Waits for `child` up to `limit`; kills it if it is still running then.
pub fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("poll child") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Connection URLs of the test servers, or `None` (skip) when there are none.
pub fn pg_servers() -> Option<(String, String)> {
    match (
        std::env::var("TIDEWATER_PG_PRIMARY"),
        std::env::var("TIDEWATER_PG_REPLICA"),
    ) {
        (Ok(primary), Ok(replica)) => Some((primary, replica)),
        _ if std::env::var_os("TIDEWATER_REQUIRE_PG").is_some() => {
            panic!(
                "TIDEWATER_REQUIRE_PG is set but TIDEWATER_PG_PRIMARY/REPLICA are not: run `bash scripts/pg.sh up` and `eval \"$(bash scripts/pg.sh env)\"`"
            )
        }
        _ => {
            eprintln!(
                "skipped: no PostgreSQL (run `bash scripts/pg.sh up` and `eval \"$(bash scripts/pg.sh env)\"`)"
            );
            None
        }
    }
}

/// Runs SQL with psql; returns the rows, `|`-separated.
pub fn sql(url: &str, statement: &str) -> Vec<String> {
    let output = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-XAtqc", statement])
        .output()
        .expect("running psql");
    assert!(
        output.status.success(),
        "psql failed on {statement}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A fresh prefix in the test bucket, or `None` when no S3 server is configured.
pub fn s3_prefix(test: &str) -> Option<String> {
    match std::env::var("TIDEWATER_S3_BUCKET") {
        Ok(bucket) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos();
            Some(format!("s3://{bucket}/{test}-{nanos}"))
        }
        Err(_) if std::env::var_os("TIDEWATER_REQUIRE_S3").is_some() => {
            panic!(
                "TIDEWATER_REQUIRE_S3 is set but TIDEWATER_S3_BUCKET is not: run scripts/s3.sh up"
            )
        }
        Err(_) => {
            eprintln!("skipped: no S3 server (run scripts/s3.sh up and export its env)");
            None
        }
    }
}

pub fn with_database(url: &str, database: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("URL with a database");
    format!("{base}/{database}")
}

/// The first row of a query's result.
pub fn one(url: &str, statement: &str) -> String {
    sql(url, statement).into_iter().next().unwrap_or_default()
}

/// A fresh database named after the test, on the primary (and so the replica).
pub struct Db {
    /// On the primary.
    pub url: String,
    /// The same database on the replica.
    pub replica: String,
}

impl Db {
    pub fn fresh(name: &str) -> Option<Db> {
        let (primary, replica) = pg_servers()?;
        // A failed earlier run may have left prepared transactions, which
        // keep the database from being dropped.
        let old = with_database(&primary, name);
        let exists = sql(
            &primary,
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'"),
        );
        if exists.first().map(String::as_str) == Some("1") {
            for gid in sql(
                &old,
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()",
            ) {
                sql(
                    &old,
                    &format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")),
                );
            }
        }
        sql(
            &primary,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        sql(&primary, &format!("CREATE DATABASE {name}"));
        let db = Db {
            url: with_database(&primary, name),
            replica: with_database(&replica, name),
        };
        // Wait until the replica has the database too.
        let start = Instant::now();
        while Command::new("psql")
            .args([db.replica.as_str(), "-XAtqc", "select 1"])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the replica never got database {name}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(db)
    }
}

/// Copies the `*.parquet` objects directly under `url` (a folder or an
/// object-store URL) into `to`, with their sizes.
pub fn download(url: &str, to: &Path) -> Vec<(String, u64)> {
    use object_store::ObjectStoreExt;
    std::fs::create_dir_all(to).expect("download folder");
    let location = tidewater_core::open_location(url).expect("open location");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let listed = location
            .store
            .list_with_delimiter(Some(&location.prefix))
            .await
            .expect("list");
        let mut files = Vec::new();
        for object in listed.objects {
            let Some(name) = object.location.filename().map(str::to_string) else {
                continue;
            };
            if !name.ends_with(".parquet") {
                continue;
            }
            let bytes = location
                .store
                .get(&object.location)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes");
            std::fs::write(to.join(&name), &bytes).expect("write");
            files.push((name, object.size));
        }
        files
    })
}

/// Every file below `dir` (none when it does not exist).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walk(&path));
            } else {
                found.push(path);
            }
        }
    }
    found
}
