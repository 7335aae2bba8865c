//! PostgreSQL backfills keyed by something other than one integer, through
//! the `tidewater` binary as users run them: a table keyed by a uuid, one by
//! text in a collation whose order is not the bytes' (ICU English: `a` <
//! `B`), and one by a composite (int, timestamptz) key with microseconds and
//! times before 1970. Each is read from the streaming replica (throttled on
//! its lag) and written to the primary in both sink modes, killed with
//! SIGKILL at random instants and rerun until complete. The oracle is the
//! source table itself: the target must hold exactly its rows (EXCEPT ALL
//! both ways, and the same count; the exactly-once target has no key, so a
//! row written twice would show).
//!
//! Also: a job store reached over TLS with `sslmode=verify-ca`; every
//! subtask's connection is visible by its `application_name`
//! in `pg_stat_activity` during a run, and a key that is nullable or not
//! unique is refused, naming the column.
//!
//! Skipped without `TIDEWATER_PG_PRIMARY`, unless `TIDEWATER_REQUIRE_PG` is set.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod support;

use std::time::{Duration, Instant};

use common::{Db, one, sql, text};
use support::{Folder, killed_at_random_instants, run, spawn_run, stderr};

const ROWS: u64 = 30_000;

/// One kind of key: the source table, and the spec's `key`.
struct Keyed {
    what: &'static str,
    /// Creates and fills `src`.
    ddl: &'static str,
    /// The source's `key` (and, for upsert, the sink's).
    key: &'static str,
}

const UUID: Keyed = Keyed {
    what: "uuid key",
    ddl: "CREATE TABLE src (id uuid PRIMARY KEY, n bigint NOT NULL, s text);
          INSERT INTO src SELECT md5(i::text)::uuid, i, 'row ' || i FROM generate_series(1, 30000) i;",
    key: r#""id""#,
};

// Text in ICU English order, with quotes, backslashes, spaces, accents and
// case that byte order would sort differently.
const TEXT: Keyed = Keyed {
    what: "text key",
    ddl: r#"CREATE TABLE src (code text COLLATE "en-x-icu" PRIMARY KEY, n bigint NOT NULL, s text);
          INSERT INTO src SELECT (ARRAY['a', 'B', 'ä', 'Z', '_x', 'o''q', 'x\y', 'é ', 'Ω'])[1 + i % 9]
                                 || ' ' || i, i, 'row ' || i
            FROM generate_series(1, 30000) i;"#,
    key: r#""code""#,
};

const COMPOSITE: Keyed = Keyed {
    what: "composite key",
    ddl: "CREATE TABLE src (tenant int, at timestamptz, n bigint NOT NULL, s text,
                            PRIMARY KEY (tenant, at));
          INSERT INTO src SELECT i % 7,
                                 timestamptz '1969-12-31 23:00:00.5+00' + i::int8 * 1000001 * interval '1 microsecond',
                                 i, 'row ' || i
            FROM generate_series(1, 30000) i;",
    key: r#"["tenant", "at"]"#,
};

/// A replica → primary job over `src` into `dst`, held to 15k rows/s (about
/// two seconds a run) and checkpointed every 200 ms.
fn spec(name: &str, state: &str, db: &Db, keyed: &Keyed, dst: &str, mode: &str) -> String {
    let sink_key = if mode == "upsert" {
        format!("key = {}\n", keyed.key)
    } else {
        String::new()
    };
    // The exactly-once target has no key: a duplicate would show.
    let create = if mode == "upsert" {
        format!("CREATE TABLE IF NOT EXISTS {dst} (LIKE src INCLUDING INDEXES)")
    } else {
        format!("CREATE TABLE IF NOT EXISTS {dst} (LIKE src)")
    };
    format!(
        r#"
[job]
name = "{name}"
state = "{state}"
checkpoint_interval = "200ms"
parallelism = 2

[sources.src]
type = "postgres"
url = "{replica}"
table = "src"
key = {key}
splits = 6
batch_rows = 700
rows_per_second = 15_000
max_replica_lag = "5s"
replica_url = "{replica}"

[sinks.out]
inputs = ["src"]
type = "postgres"
url = "{primary}"
table = "{dst}"
mode = "{mode}"
{sink_key}create = "{create}"
"#,
        replica = db.replica,
        primary = db.url,
        key = keyed.key,
    )
}

/// Waits until the replica has `src` whole.
fn replicated(db: &Db) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let on_replica = sql(
            &db.replica,
            "SELECT count(*) FROM pg_class WHERE relname = 'src'",
        );
        if on_replica.first().map(String::as_str) == Some("1")
            && one(&db.replica, "SELECT count(*) FROM src") == ROWS.to_string()
        {
            return;
        }
        assert!(Instant::now() < deadline, "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `dst` holds exactly `src`'s rows.
fn assert_exact(db: &Db, dst: &str, what: &str) {
    let count = one(&db.url, &format!("SELECT count(*) FROM {dst}"));
    let missing = one(
        &db.url,
        &format!("SELECT count(*) FROM (SELECT * FROM src EXCEPT ALL SELECT * FROM {dst}) d"),
    );
    let extra = one(
        &db.url,
        &format!("SELECT count(*) FROM (SELECT * FROM {dst} EXCEPT ALL SELECT * FROM src) d"),
    );
    assert_eq!(
        (count.as_str(), missing.as_str(), extra.as_str()),
        (ROWS.to_string().as_str(), "0", "0"),
        "{what}: {dst} has {count} rows, {missing} of src missing, {extra} not in src"
    );
}

/// Both sink modes, killed at 12 random instants each.
fn keyed_backfills_survive_kills(keyed: &Keyed, database: &str) {
    let Some(db) = Db::fresh(database) else {
        return;
    };
    sql(&db.url, &format!("{} ANALYZE src;", keyed.ddl));
    replicated(&db);
    for mode in ["exactly-once", "upsert"] {
        let round = std::sync::atomic::AtomicUsize::new(0);
        let what = format!("{}, {mode}", keyed.what);
        let dst = |folder: &Folder| {
            let name = folder
                .path("")
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            format!(
                "dst_{}",
                name.unwrap_or_default()
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .collect::<String>()
                    .to_lowercase()
            )
        };
        killed_at_random_instants(
            &what,
            12,
            Duration::from_millis(2500),
            |folder| {
                let n = round.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                spec(
                    &format!("{database}-{mode}-{n}"),
                    &folder.s("state"),
                    &db,
                    keyed,
                    &dst(folder),
                    mode,
                )
            },
            |folder| {
                assert_exact(&db, &dst(folder), &what);
                assert_eq!(
                    one(
                        &db.url,
                        "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()"
                    ),
                    "0",
                    "{what}: a prepared transaction was left"
                );
            },
        );
    }
}

#[test]
fn a_uuid_keyed_backfill_survives_kills_in_both_sink_modes() {
    keyed_backfills_survive_kills(&UUID, "tw_keys_uuid");
}

#[test]
fn a_text_keyed_backfill_in_icu_order_survives_kills_in_both_sink_modes() {
    keyed_backfills_survive_kills(&TEXT, "tw_keys_text");
}

#[test]
fn a_composite_keyed_backfill_survives_kills_in_both_sink_modes() {
    keyed_backfills_survive_kills(&COMPOSITE, "tw_keys_composite");
}

#[test]
fn every_connection_is_named_after_its_job_operator_and_subtask() {
    let Some(db) = Db::fresh("tw_keys_names") else {
        return;
    };
    sql(&db.url, &format!("{} ANALYZE src;", COMPOSITE.ddl));
    replicated(&db);
    let folder = Folder::new();
    // Slow enough to be watched: 3,000 rows/s.
    let body = spec(
        "named",
        &folder.s("state"),
        &db,
        &COMPOSITE,
        "dst_named",
        "exactly-once",
    )
    .replace("rows_per_second = 15_000", "rows_per_second = 3_000");
    let job = folder.write("job.toml", &body);
    let mut child = spawn_run(&job, &[]);
    let want = [
        ("replica", "tidewater/named/src/0"),
        ("replica", "tidewater/named/src/1"),
        ("primary", "tidewater/named/out/0"),
        ("primary", "tidewater/named/out/1"),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.len() < want.len() {
        for (server, name) in want {
            let url = if server == "replica" {
                &db.replica
            } else {
                &db.url
            };
            let n = one(
                url,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'"),
            );
            if n != "0" && !seen.contains(&name) {
                seen.push(name);
            }
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        seen.len(),
        want.len(),
        "seen in pg_stat_activity: {seen:?}, wanted {want:?}\n{}",
        text(&output)
    );
}

/// Runs a job reading `table` of `db` by `key` into Parquet files.
fn run_to_parquet(db: &Db, table: &str, key: &str) -> std::process::Output {
    let folder = Folder::new();
    let body = format!(
        r#"
[job]
name = "parquet-{table}"
state = "{state}"

[sources.src]
type = "postgres"
url = "{url}"
table = "{table}"
key = {key}

[sinks.out]
inputs = ["src"]
type = "parquet"
path = "{out}"
"#,
        state = folder.s("state"),
        out = folder.s("out"),
        url = db.url,
    );
    run(&folder.write("job.toml", &body), &[])
}

/// A table keyed by random uuids is read at a heap page per row: the run
/// says so, and what to do; a table stored in key order is read quietly.
#[test]
fn a_key_the_rows_are_not_stored_in_the_order_of_is_warned_of() {
    let Some(db) = Db::fresh("tw_keys_order") else {
        return;
    };
    sql(
        &db.url,
        &format!(
            "{} CREATE TABLE ordered (id bigint PRIMARY KEY, n bigint NOT NULL);
             INSERT INTO ordered SELECT i, i FROM generate_series(1, 30000) i;
             ANALYZE src; ANALYZE ordered;",
            UUID.ddl
        ),
    );
    for (table, warned) in [("src", true), ("ordered", false)] {
        let output = run_to_parquet(&db, table, r#""id""#);
        assert!(output.status.success(), "{table}:\n{}", text(&output));
        let said = stderr(&output);
        assert_eq!(
            said.contains("its rows are stored in no such order") && said.contains("CLUSTER"),
            warned,
            "{table}:\n{}",
            text(&output)
        );
    }
}

#[test]
fn a_key_that_may_be_null_or_repeat_is_refused_by_name() {
    let Some(db) = Db::fresh("tw_keys_refused") else {
        return;
    };
    sql(
        &db.url,
        "CREATE TABLE nullable (code text UNIQUE, n bigint);
         CREATE TABLE repeats (code text NOT NULL, n bigint);
         CREATE TABLE floats (x float8 PRIMARY KEY);
         CREATE TABLE loose (x numeric PRIMARY KEY);",
    );
    let cases = [
        (
            "nullable",
            r#""code""#,
            "key column 'code' of 'nullable' may be NULL",
        ),
        (
            "repeats",
            r#""code""#,
            "no primary key or unique index of 'repeats' is on (code)",
        ),
        // A unique (code) does not make (n) unique.
        ("nullable", r#""n""#, "may be NULL"),
        (
            "floats",
            r#""x""#,
            "key column 'x' has type double precision",
        ),
        ("loose", r#""x""#, "numeric without a declared scale"),
        ("repeats", r#"["code", "nope"]"#, "has no key column 'nope'"),
    ];
    for (table, key, want) in cases {
        let output = run_to_parquet(&db, table, key);
        assert!(!output.status.success(), "{table} by {key} ran");
        assert!(
            stderr(&output).contains(want),
            "{table} by {key}:\n{}",
            text(&output)
        );
    }
}

#[test]
fn a_job_store_over_tls_answers_with_the_ca_checked() {
    let Some(db) = Db::fresh("tw_keys_tls_store") else {
        return;
    };
    let ca =
        std::env::var("TIDEWATER_PG_TLS_DIR").expect("scripts/pg.sh env exports it") + "/ca.crt";
    // verify-ca by address: rustls must have a crypto provider chosen before
    // the store connects (it panicked without one).
    let store = format!("{}?sslmode=verify-ca&sslrootcert={ca}", db.url);
    let output = support::tidewater()
        .args(["jobs", "--store", &store])
        .output()
        .expect("running tidewater jobs");
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("no jobs in"),
        "{}",
        text(&output)
    );
}
