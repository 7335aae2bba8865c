//! The PostgreSQL connectors against a real primary and streaming replica
//! (started by `scripts/pg.sh up`; `scripts/test.sh` does it). Each test works
//! in a database of its own.
//!
//! Without `TIDEWATER_PG_PRIMARY` the tests say so and pass, unless
//! `TIDEWATER_REQUIRE_PG` is set (as `scripts/test.sh` does), where they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    Db, Rng, example_binary, kill_randomly_until_complete, one, pg_servers as servers, sql, text,
    with_database,
};

impl Db {
    fn seed(&self, rows: u64) {
        let output = Command::new(example_binary("pg_backfill"))
            .args(["--seed", &rows.to_string(), "--source-url", &self.url])
            .output()
            .expect("seeding");
        assert!(
            output.status.success(),
            "seeding failed:\n{}",
            text(&output)
        );
    }

    fn backfill(&self, state: &Path, mode: &str, extra: &[&str]) -> Command {
        let mut command = Command::new(example_binary("pg_backfill"));
        command
            .args(["--source-url", &self.url, "--sink-mode", mode, "--state"])
            .arg(state)
            .args([
                "--checkpoint-interval",
                "200ms",
                "--parallelism",
                "2",
                "--batch-rows",
                "5000",
            ])
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    /// Asserts dst holds exactly the rows of src with id % 3 != 0, once each, w = 2v.
    /// Starts the backfill with a status file (returned) and its log in `state`.
    fn spawn_with_status(&self, state: &Path, mode: &str, extra: &[&str]) -> (Child, PathBuf) {
        let status = state.join("status.json");
        let child = self
            .backfill(state, mode, extra)
            .arg("--status-file")
            .arg(&status)
            .stdout(Stdio::null())
            .stderr(log_file(state))
            .spawn()
            .unwrap();
        (child, status)
    }

    fn assert_dst_exact(&self, rows: u64) {
        let expected = (0..rows).filter(|i| i % 3 != 0).count().to_string();
        assert_eq!(
            one(&self.url, "SELECT count(*) FROM dst"),
            expected,
            "rows in dst"
        );
        assert_eq!(
            one(&self.url, "SELECT count(DISTINCT id) FROM dst"),
            expected,
            "distinct ids in dst"
        );
        assert_eq!(
            one(
                &self.url,
                "SELECT count(*) FROM dst d JOIN src s USING (id) \
                            WHERE d.k = s.k AND d.v = s.v AND d.s = s.s AND d.w = s.v * 2 AND s.id % 3 <> 0"
            ),
            expected,
            "rows of dst equal to their src row"
        );
    }
}

/// A field of the backfill's status file (`Null` before the first write).
fn status_field(status: &Path, field: &str) -> serde_json::Value {
    std::fs::read(status)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .map(|v| v[field].clone())
        .unwrap_or_default()
}

/// Rows the backfill has read, from its status file (0 before the first write).
fn rows_read(status: &Path) -> u64 {
    status_field(status, "rows_read").as_u64().unwrap_or(0)
}

/// Where a child's stderr goes: a pipe nobody reads until the end would fill
/// up and block the child's logging.
fn log_file(dir: &Path) -> std::fs::File {
    std::fs::File::create(dir.join("stderr.log")).expect("log file")
}

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
}

/// Undoes a paused replay even when the test fails: a paused replica would break every later test.
struct ResumeReplay(String);

impl Drop for ResumeReplay {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([self.0.as_str(), "-XAtqc", "SELECT pg_wal_replay_resume()"])
            .output();
    }
}

/// Kills the backfill at random instants and restarts it until it completes,
/// then checks `dst`; repeats with fresh state and tables until `kills` kills
/// landed (a fast machine finishes a round in few kills).
fn crash_until_exact(db: &Db, mode: &str, rows: u64, kills: usize, fresh_dst: &str) {
    let mut rng = Rng::from_time();
    let mut done = 0;
    let mut rounds = 0;
    while done < kills {
        rounds += 1;
        sql(&db.url, &format!("DROP TABLE IF EXISTS dst; {fresh_dst}"));
        sql(&db.url, "DROP TABLE IF EXISTS tidewater_commits");
        let state = tempfile::tempdir().unwrap();
        let (output, landed) = kill_randomly_until_complete(
            || db.backfill(state.path(), mode, &[]),
            kills - done,
            Duration::from_millis(750),
            &mut rng,
            || {},
        );
        done += landed;
        assert!(output.status.success(), "a run failed:\n{}", text(&output));
        db.assert_dst_exact(rows);
        assert_eq!(
            // Only this test's database: the other tests run at the same time.
            one(
                &db.url,
                "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
            ),
            "0",
            "prepared transactions left behind"
        );
        eprintln!("{mode}: round {rounds} exact, {done} kills so far");
    }
}

#[test]
fn exactly_once_mode_survives_random_kills() {
    let Some(db) = Db::fresh("tw_crash_exactly_once") else {
        return;
    };
    let rows = 400_000;
    db.seed(rows);
    // No primary key: a row committed twice would show up as a duplicate.
    let no_key =
        "CREATE TABLE dst (id bigint, k bigint, v double precision, s text, w double precision)";
    crash_until_exact(&db, "exactly-once", rows, 10, no_key);
    // Every checkpoint was committed once: one commit row per (subtask, checkpoint).
    assert_eq!(
        one(
            &db.url,
            "SELECT count(*) = count(DISTINCT (sink, subtask, checkpoint)) FROM tidewater_commits"
        ),
        "t"
    );
}

#[test]
fn upsert_mode_survives_random_kills() {
    let Some(db) = Db::fresh("tw_crash_upsert") else {
        return;
    };
    let rows = 400_000;
    db.seed(rows);
    crash_until_exact(&db, "upsert", rows, 10, "");
}

#[test]
fn replica_lag_pauses_the_backfill_until_the_replica_catches_up() {
    let Some(db) = Db::fresh("tw_throttle") else {
        return;
    };
    let rows = 300_000;
    db.seed(rows);
    let state = tempfile::tempdir().unwrap();
    let poll = Duration::from_millis(200);
    let (child, status) = db.spawn_with_status(
        state.path(),
        "exactly-once",
        &[
            "--max-replica-lag",
            "1s",
            "--replica-url",
            &db.replica,
            "--lag-poll-interval",
            "200ms",
            "--rows-per-second",
            "40000",
        ],
    );
    let rows_read = || rows_read(&status);
    // Let it run, then stop replay on the replica while the backfill keeps writing.
    while rows_read() < 20_000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _resume = ResumeReplay(db.replica.clone());
    sql(&db.replica, "SELECT pg_wal_replay_pause()");
    let lag = || -> f64 {
        one(
            &db.replica,
            "SELECT CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 \
                          ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END",
        )
        .parse()
        .unwrap_or(0.0)
    };
    let start = Instant::now();
    while lag() <= 1.0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the replica lag never passed 1s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Within two polling intervals the source stops; then it must stay stopped.
    std::thread::sleep(poll * 2 + Duration::from_millis(300));
    let throttled = || status_field(&status, "throttled_s").as_f64().unwrap_or(0.0);
    let (stopped_at, throttled_before) = (rows_read(), throttled());
    std::thread::sleep(Duration::from_secs(2));
    let still = rows_read();
    assert_eq!(
        stopped_at, still,
        "the backfill kept reading while the replica lagged"
    );
    // The pause shows in the metrics: time held by throttles keeps growing.
    let held = throttled() - throttled_before;
    assert!(
        held >= 1.5,
        "throttled_s grew by {held:.2} s in 2 s of a paused source"
    );
    assert!(
        stopped_at < rows,
        "the backfill finished before the lag test could observe it"
    );

    sql(&db.replica, "SELECT pg_wal_replay_resume()");
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", read_log(state.path()));
    assert!(
        read_log(state.path()).contains("throttled: replica lag"),
        "{}",
        text(&output)
    );
    db.assert_dst_exact(rows);
}

#[test]
fn refused_rows_fail_the_job_or_go_to_dead_letters() {
    let Some(db) = Db::fresh("tw_bad_rows") else {
        return;
    };
    let rows = 20_000;
    db.seed(rows);
    // v = (i % 1000) / 4 is 42.5 exactly when i % 1000 == 170.
    sql(
        &db.url,
        "CREATE TABLE dst (id bigint PRIMARY KEY, k bigint, v double precision, s text, \
                  w double precision, CONSTRAINT no_42_5 CHECK (v <> 42.5))",
    );
    let bad: Vec<u64> = (0..rows)
        .filter(|i| i % 3 != 0 && i % 1000 == 170)
        .collect();

    // No budget: the job fails, naming the constraint and a row.
    let state = tempfile::tempdir().unwrap();
    let failed: Output = db
        .backfill(state.path(), "exactly-once", &[])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    let message = String::from_utf8_lossy(&failed.stderr);
    assert!(
        message.contains("no_42_5") && message.contains("refused"),
        "{message}"
    );

    // With a budget: those rows go to the dead-letter table, every other row to dst.
    sql(&db.url, "TRUNCATE dst; TRUNCATE tidewater_commits");
    let state = tempfile::tempdir().unwrap();
    let budget = bad.len().to_string();
    let done = db
        .backfill(state.path(), "exactly-once", &["--max-bad-rows", &budget])
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", text(&done));
    let letters = sql(
        &db.url,
        "SELECT (row->>'id')::bigint FROM tidewater_dead_letters ORDER BY 1",
    );
    let letters: Vec<u64> = letters.iter().map(|l| l.parse().unwrap()).collect();
    assert_eq!(letters, bad, "dead letters");
    assert!(
        one(
            &db.url,
            "SELECT bool_and(error LIKE '%no_42_5%') FROM tidewater_dead_letters"
        ) == "t"
    );
    let expected = (0..rows).filter(|i| i % 3 != 0).count() - bad.len();
    assert_eq!(
        one(&db.url, "SELECT count(*) FROM dst"),
        expected.to_string()
    );
    assert_eq!(one(&db.url, "SELECT count(*) FROM dst WHERE v = 42.5"), "0");
}

#[test]
fn lost_connections_are_recovered_and_the_output_is_exact() {
    let Some(db) = Db::fresh("tw_connection_loss") else {
        return;
    };
    let rows = 300_000;
    db.seed(rows);
    for mode in ["upsert", "exactly-once"] {
        sql(
            &db.url,
            "DROP TABLE IF EXISTS dst; TRUNCATE tidewater_commits",
        );
        let state = tempfile::tempdir().unwrap();
        let (mut child, status) =
            db.spawn_with_status(state.path(), mode, &["--rows-per-second", "60000"]);
        // Twice mid-run: cut every client connection of this database (source and sink).
        for threshold in [60_000u64, 150_000] {
            let start = Instant::now();
            loop {
                let read = rows_read(&status);
                if read >= threshold {
                    break;
                }
                if let Some(exit) = child.try_wait().unwrap() {
                    panic!(
                        "{mode}: the job ended ({exit}) before {threshold} rows:\n{}",
                        read_log(state.path())
                    );
                }
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "{mode}: no progress to {threshold}:\n{}",
                    read_log(state.path())
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let killed = one(
                &db.url,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                                       WHERE datname = current_database() AND pid <> pg_backend_pid() \
                                       AND backend_type = 'client backend'",
            );
            assert_ne!(killed, "0", "no connection to terminate");
        }
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{mode}: {}",
            read_log(state.path())
        );
        let log = read_log(state.path());
        assert!(
            log.contains("retrying") || log.contains("restarting"),
            "{mode}: no recovery logged:\n{log}"
        );
        db.assert_dst_exact(rows);
    }
}

/// Every mapped type, with NULLs, through the source's binary COPY read path:
/// each Arrow value printed equals what the server prints for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mapped_type_reads_exactly_and_an_unsupported_one_is_named() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{
        DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, TimestampMicrosecondType,
    };
    use arrow::util::display::array_value_to_string;
    use tidewater::Source;
    use tidewater::postgres::PostgresSource;

    let Some(db) = Db::fresh("types") else { return };
    sql(
        &db.url,
        "CREATE TABLE t (id int8 PRIMARY KEY, a int2, b int4, c float4, d float8, \
           e numeric(12,2), f numeric, g bool, h text, i varchar(20), j bytea, k date, \
           l timestamp, m timestamptz, n uuid, o jsonb, p json, q tsvector);
         INSERT INTO t VALUES
           (1, -32768, 2147483647, 1.5, -2.25e300, -1234567890.12, 3.14159265358979,
            true, 'héllo', 'v', '\\x00ff10', '1969-07-20', '2000-01-01 00:00:00.000001',
            '2024-02-29 23:59:59.5+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
            '{\"b\": [1, 2], \"a\": null}', '{\"z\":1}', 'x'),
           (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
            NULL, NULL, NULL, NULL),
           (3, 7, -1, -0.0, 0.1, 0.005, -0.00000000005, false, '', 'ünï', '\\x', '2262-04-11',
            '1900-03-01 12:00:00', '1970-01-01 00:00:00+00', '00000000-0000-0000-0000-000000000000',
            '[]', 'null', NULL);",
    );

    // An unsupported column is named with its type.
    let err = PostgresSource::builder(&db.url, "t", "id")
        .build()
        .await
        .expect_err("tsvector must be refused");
    let message = err.to_string();
    assert!(
        message.contains("'q'") && message.contains("tsvector"),
        "{message}"
    );

    let columns: Vec<String> = (b'a'..=b'p').map(|c| (c as char).to_string()).collect();
    let source = PostgresSource::builder(&db.url, "t", "id")
        .columns(columns.clone())
        .batch_rows(2) // two COPY statements, the second resuming after id 2
        .splits(1)
        .build()
        .await
        .expect("building the source");
    let splits = source.splits().await.unwrap();
    let mut reader = source.open(&splits[0], None).await.unwrap();
    let mut batches = Vec::new();
    while let Some(batch) = reader.next_batch().await.unwrap() {
        batches.push(batch);
    }
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();

    // What the server prints, normalised to the forms Arrow prints.
    let expected = |column: &str, id: i64| -> Option<String> {
        let expression = match column {
            "c" | "d" => format!("{column}::float8::text"),
            "j" => "encode(j, 'hex')".to_string(),
            "l" => "to_char(l, 'YYYY-MM-DD\"T\"HH24:MI:SS.US')".to_string(),
            "m" => "to_char(m AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')".to_string(),
            "f" => "round(f, 10)::text".to_string(),
            _ => format!("{column}::text"),
        };
        let value = one(
            &db.url,
            &format!("SELECT coalesce({expression}, '<null>') FROM t WHERE id = {id}"),
        );
        (value != "<null>").then_some(value)
    };
    for (index, name) in columns.iter().enumerate() {
        let array = batch.column(batch.schema().index_of(name).unwrap());
        for row in 0..3 {
            let id = row as i64 + 1;
            let got = (!array.is_null(row)).then(|| match array.data_type() {
                DataType::Binary => array
                    .as_binary::<i32>()
                    .value(row)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
                DataType::Float32 => {
                    f64::from(array.as_primitive::<Float32Type>().value(row)).to_string()
                }
                DataType::Float64 => array.as_primitive::<Float64Type>().value(row).to_string(),
                DataType::Decimal128(_, scale) => {
                    let m = array.as_primitive::<Decimal128Type>().value(row);
                    let digits = m.unsigned_abs().to_string();
                    let scale = *scale as usize;
                    let padded = format!("{digits:0>width$}", width = scale + 1);
                    let (int, frac) = padded.split_at(padded.len() - scale);
                    format!("{}{int}.{frac}", if m < 0 { "-" } else { "" })
                }
                DataType::Date32 => {
                    let days = array.as_primitive::<Date32Type>().value(row);
                    Date32Type::to_naive_date_opt(days).unwrap().to_string()
                }
                DataType::Timestamp(..) => {
                    let micros = array.as_primitive::<TimestampMicrosecondType>().value(row);
                    arrow::temporal_conversions::timestamp_us_to_datetime(micros)
                        .unwrap()
                        .format("%Y-%m-%dT%H:%M:%S%.6f")
                        .to_string()
                }
                _ => array_value_to_string(array, row).unwrap(),
            });
            let want = expected(name, id);
            let want = match (name.as_str(), want) {
                // Arrow prints floats in Rust's shortest form, PostgreSQL in its own.
                ("c" | "d", Some(w)) => Some(w.parse::<f64>().unwrap().to_string()),
                // numeric(12,2): the server's text has the column's scale already.
                (_, w) => w,
            };
            assert_eq!(got, want, "column {name} ({index}), id {id}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_cannot_work_says_why_within_seconds() {
    use tidewater::postgres::{PostgresSink, PostgresSource, SinkMode};
    let Some((primary, _)) = servers() else {
        return;
    };
    let started = Instant::now();
    // Nothing listens on port 1: refused at once, not a pool timeout.
    let refused = PostgresSource::builder("postgres://postgres@127.0.0.1:1/postgres", "src", "id")
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("connection refused by 127.0.0.1:1")
            && refused.contains("is PostgreSQL running there"),
        "{refused}"
    );
    assert!(!refused.contains("pool timed out"), "{refused}");
    // A database that does not exist, on a server that is up.
    let missing = with_database(&primary, "no_such_database_here");
    let absent = PostgresSink::builder(&missing, "dst", SinkMode::Upsert)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(absent, tidewater::Error::InvalidConfig(_)),
        "{absent}"
    );
    let absent = absent.to_string();
    assert!(
        absent.contains("database 'no_such_database_here' does not exist"),
        "{absent}"
    );
    // A database the server's pg_hba.conf refuses (scripts/pg.sh sets one up).
    let refused = with_database(&primary, "tw_hba_refused");
    let refusal = PostgresSource::builder(&refused, "src", "id")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(refusal, tidewater::Error::InvalidConfig(_)),
        "{refusal}"
    );
    let refusal = refusal.to_string();
    assert!(
        refusal.contains("does not let user 'postgres' into database 'tw_hba_refused'")
            && refusal.contains("its pg_hba.conf needs an entry for this host, user and database"),
        "{refusal}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}: the cause must come before any pool timeout",
        started.elapsed()
    );
}

/// Jobs started together against a database that has never seen tidewater
/// all create its bookkeeping tables at once, and here their shared target
/// table too. PostgreSQL's `CREATE TABLE IF NOT EXISTS` is not safe against
/// itself (two creators can both pass the check and one fails on the
/// catalog's unique index), so every sink must open, not just the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sinks_opened_at_once_on_a_new_database_all_open() {
    use tidewater::postgres::{PostgresSink, SinkMode};
    let Some(db) = Db::fresh("tw_sinks_at_once") else {
        return;
    };
    const SINKS: usize = 8;
    for round in 0..10 {
        sql(
            &db.url,
            "DROP TABLE IF EXISTS tidewater_commits, tidewater_dead_letters",
        );
        let table = format!("dst_{round}");
        let create = format!("CREATE TABLE IF NOT EXISTS {table} (id bigint PRIMARY KEY)");
        let mut opening = tokio::task::JoinSet::new();
        for sink in 0..SINKS {
            let builder =
                PostgresSink::builder(&db.url, &table, SinkMode::Upsert).create_if_missing(&create);
            opening.spawn(async move { (sink, builder.build().await) });
        }
        while let Some(opened) = opening.join_next().await {
            if let (sink, Err(error)) = opened.unwrap() {
                panic!("round {round}: sink {sink} into {table} did not open: {error}");
            }
        }
    }
    assert_eq!(
        one(
            &db.url,
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'tidewater\\_%'"
        ),
        "2"
    );
}

/// A sink whose session the server ends while it waits to create its
/// tables (as it ends the session of a process paused in that transaction
/// past its idle limit) creates them again on a new connection, instead of
/// failing the job's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_whose_session_is_ended_while_creating_tables_opens_anyway() {
    use tidewater::postgres::{PostgresSink, SinkMode};
    let Some(db) = Db::fresh("tw_sink_session_ended") else {
        return;
    };
    // The sinks' creation lock ("tidesink"), held by another session.
    const LOCK: i64 = 0x7469_6465_7369_6e6b;
    let mut holder = Command::new("psql")
        .env("PGAPPNAME", "lock-holder")
        .args([
            db.url.as_str(),
            "-Xqc",
            &format!("BEGIN; SELECT pg_advisory_xact_lock({LOCK}); SELECT pg_sleep(120)"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running psql");
    let waiting_until = |what: &str, query: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = one(&db.url, query);
            if !found.is_empty() {
                return found;
            }
            assert!(Instant::now() < deadline, "no {what} in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    waiting_until(
        "lock held",
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted",
    );
    let opening = tokio::spawn(
        PostgresSink::builder(&db.url, "dst", SinkMode::Upsert)
            .create_if_missing("CREATE TABLE IF NOT EXISTS dst (id bigint PRIMARY KEY)")
            .build(),
    );
    let waiter = waiting_until(
        "sink waiting for the lock",
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
    );
    sql(&db.url, &format!("SELECT pg_terminate_backend({waiter})"));
    sql(
        &db.url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'lock-holder'",
    );
    let _ = holder.wait();
    if let Err(error) = opening.await.unwrap() {
        panic!("the sink did not open: {error}");
    }
    assert_eq!(
        one(
            &db.url,
            "SELECT count(*) FROM pg_tables WHERE tablename IN \
             ('dst', 'tidewater_commits', 'tidewater_dead_letters')"
        ),
        "3"
    );
}

/// The folder of `scripts/pg.sh`'s throwaway CA and certificates.
fn tls_dir() -> Option<PathBuf> {
    servers()?;
    match std::env::var_os("TIDEWATER_PG_TLS_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("TIDEWATER_REQUIRE_PG").is_some() => {
            panic!("TIDEWATER_PG_TLS_DIR is not set: `eval \"$(bash scripts/pg.sh env)\"`")
        }
        None => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_verified_against_the_ca_and_the_host_name() {
    use tidewater::Source;
    use tidewater::postgres::{PostgresSink, PostgresSource, SinkMode};
    let Some(tls) = tls_dir() else {
        return;
    };
    let (primary, _) = servers().expect("checked by tls_dir");
    let port = primary
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .expect("a port in the primary's URL")
        .to_string();
    let ca = tls.join("ca.crt").display().to_string();
    let url = |host: &str, database: &str, query: &str| {
        format!("postgres://postgres@{host}:{port}/{database}?{query}")
    };
    // tw_tls_only refuses connections without TLS (scripts/pg.sh).
    sql(
        &url("localhost", "tw_tls_only", "sslmode=require"),
        "DROP TABLE IF EXISTS t; CREATE TABLE t (id bigint PRIMARY KEY, s text);
         INSERT INTO t SELECT i, 'row ' || i FROM generate_series(1, 1000) i",
    );
    let build = |url: String| async move {
        PostgresSource::builder(&url, "t", "id")
            .batch_rows(300)
            .build()
            .await
    };

    // verify-full against the right CA and the certificate's name: rows
    // are read, over TLS (the server says so).
    let good = url(
        "localhost",
        "tw_tls_only",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let source = build(good.clone())
        .await
        .expect("verify-full with the right CA");
    let splits = source.splits().await.unwrap();
    let mut rows = 0;
    for split in &splits {
        let mut reader = source.open(split, None).await.unwrap();
        while let Some(batch) = reader.next_batch().await.unwrap() {
            rows += batch.num_rows();
            let over_tls = one(
                &url("localhost", "tw_tls_only", "sslmode=require"),
                "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = 'tidewater'",
            );
            assert_eq!(over_tls, "t", "the reader's connection is not TLS");
        }
    }
    assert_eq!(rows, 1000);
    PostgresSink::builder(&good, "t", SinkMode::Upsert)
        .build()
        .await
        .expect("a sink over verify-full");

    let fails = |url: String| async move {
        match build(url).await {
            Ok(_) => panic!("connected"),
            Err(e) => {
                assert!(matches!(e, tidewater::Error::InvalidConfig(_)), "{e}");
                e.to_string()
            }
        }
    };
    // Another CA: not trusted.
    let other = tls.join("other-ca.crt").display().to_string();
    let wrong_ca = fails(url(
        "localhost",
        "tw_tls_only",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .await;
    assert!(
        wrong_ca.contains("is not signed by a CA this client trusts")
            && wrong_ca.contains("sslrootcert"),
        "{wrong_ca}"
    );
    // The right CA, but a name the certificate does not list.
    let wrong_name = fails(url(
        "127.0.0.1",
        "tw_tls_only",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert!(
        wrong_name.contains("not valid for the host name '127.0.0.1'"),
        "{wrong_name}"
    );
    // verify-ca checks the CA only.
    build(url(
        "127.0.0.1",
        "tw_tls_only",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-ca by address");
    // TLS turned off where the server requires it: said so.
    let plain = fails(url("localhost", "tw_tls_only", "sslmode=disable")).await;
    assert!(
        plain.contains("requires TLS") && plain.contains("sslmode=disable"),
        "{plain}"
    );
    // A CA file that is not there is named, not taken for an unknown host.
    let missing = fails(url(
        "localhost",
        "tw_tls_only",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ))
    .await;
    assert!(
        missing.contains("`sslrootcert` in the URL names '/nonexistent/ca.pem'"),
        "{missing}"
    );

    // tw_tls_cert lets in only a client certificate the CA signed.
    let (cert, key) = (tls.join("client.crt"), tls.join("client.key"));
    let with_cert = url(
        "localhost",
        "tw_tls_cert",
        &format!(
            "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
            cert.display(),
            key.display()
        ),
    );
    sql(
        &with_cert,
        "DROP TABLE IF EXISTS t; CREATE TABLE t (id bigint PRIMARY KEY); INSERT INTO t VALUES (1)",
    );
    build(with_cert).await.expect("a client certificate");
    let no_cert = fails(url(
        "localhost",
        "tw_tls_cert",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert!(no_cert.contains("certificate"), "{no_cert}");
}

/// Reads every split of `source`, each resumed from its cursor after every
/// batch (as a restore would), and returns the key column's text per row;
/// gives up past `most` rows (a cursor that does not advance reads forever).
async fn read_resuming(
    source: &tidewater::postgres::PostgresSource,
    key: &str,
    most: usize,
) -> Vec<String> {
    use arrow::util::display::array_value_to_string;
    use tidewater::Source;
    let mut keys = Vec::new();
    for split in source.splits().await.unwrap() {
        let mut cursor = None;
        loop {
            let mut reader = source.open(&split, cursor.as_ref()).await.unwrap();
            let Some(batch) = reader.next_batch().await.unwrap() else {
                break;
            };
            if keys.len() > most {
                return keys;
            }
            let column = batch.column_by_name(key).unwrap();
            for row in 0..batch.num_rows() {
                keys.push(array_value_to_string(column, row).unwrap());
            }
            // The cursor survives a checkpoint: as JSON text and back.
            let text = serde_json::to_string(&reader.cursor()).unwrap();
            cursor = Some(serde_json::from_str(&text).unwrap());
        }
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_and_date_time_keys_resume_exactly_from_their_cursors() {
    use tidewater::postgres::PostgresSource;
    let Some(db) = Db::fresh("tw_numeric_time_keys") else {
        return;
    };
    // Keys one unit of their scale apart, so a cursor rounded or cut to
    // seconds would skip or repeat rows; negative numerics, days before 1970
    // and a year BC.
    sql(
        &db.url,
        "CREATE TABLE amounts (x numeric(24, 6) PRIMARY KEY, n int);
         INSERT INTO amounts SELECT -1000.5 + i * 0.000001 + (i % 3) * 123456789.0, i
           FROM generate_series(1, 3000) i;
         CREATE TABLE moments (d date, t timestamp, n int, PRIMARY KEY (d, t));
         INSERT INTO moments
           SELECT date '0044-03-15 BC' + (i % 5) * 365 * 800, timestamp '1969-12-31 23:59:59' + i * interval '1 microsecond', i
           FROM generate_series(1, 3000) i;
         ANALYZE amounts; ANALYZE moments;",
    );
    for (table, key, first) in [
        ("amounts", vec!["x"], "x"),
        ("moments", vec!["d", "t"], "n"),
    ] {
        let source = PostgresSource::builder(&db.url, table, key.clone())
            .splits(5)
            .batch_rows(97)
            .build()
            .await
            .unwrap();
        let mut got = read_resuming(&source, first, 6000).await;
        assert_eq!(got.len(), 3000, "{table}: rows read");
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 3000, "{table}: a row was read twice");
    }
}
