//! `tidewater-bench pg`: the pg_backfill example in both sink modes beside what a user
//! would otherwise do, on the same server in the same run (issue 3):
//!
//! - the hand-written loop: `SELECT ... WHERE id > $1 ORDER BY id LIMIT 5000`,
//!   then one batched upsert (UNNEST ... ON CONFLICT DO UPDATE), one batch at
//!   a time;
//! - raw `COPY ... FROM STDIN (FORMAT binary)` of the same rows into an empty
//!   copy of `dst` (the rows are read and encoded first; only the COPY is
//!   timed): the load ceiling;
//! - `INSERT INTO dst SELECT ... FROM src ... ON CONFLICT ...` inside the
//!   server: the upsert ceiling.
//!
//! Every contender writes into an emptied table; the order rotates per round.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::median;
use sqlx::{Connection, PgConnection, Row};

#[derive(Debug, clap::Args)]
pub struct PgArgs {
    /// The PostgreSQL server (scripts/pg.sh env exports it).
    #[arg(long, env = "TIDEWATER_PG_PRIMARY")]
    url: String,
    /// Rows in `src` (seeded by pg_backfill --seed when it holds another count).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// pg_backfill's parallelism.
    #[arg(long, default_value_t = 2)]
    parallelism: usize,
    /// Rounds; medians are reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Where results go.
    #[arg(long, default_value = "bench-results/pg")]
    out_dir: PathBuf,
    /// A streaming replica of `--url` on the same machine (scripts/pg.sh
    /// starts one). Its WAL replay is paused while a contender is timed and
    /// caught up between contenders, so no contender pays for it: in
    /// production the replica replays on a machine of its own.
    #[arg(long, env = "TIDEWATER_PG_REPLICA")]
    replica_url: Option<String>,
}

/// Pauses WAL replay on the replica, if there is one.
async fn pause_replay(replica: Option<&mut PgConnection>) -> anyhow::Result<()> {
    if let Some(replica) = replica {
        execute(replica, "SELECT pg_wal_replay_pause()").await?;
    }
    Ok(())
}

/// Resumes replay on the replica and waits until it replayed everything the
/// primary wrote so far.
async fn catch_up(
    primary: &mut PgConnection,
    replica: Option<&mut PgConnection>,
) -> anyhow::Result<()> {
    let Some(replica) = replica else {
        return Ok(());
    };
    let target: String = sqlx::query("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&mut *primary)
        .await?
        .get(0);
    execute(replica, "SELECT pg_wal_replay_resume()").await?;
    loop {
        let caught_up: bool = sqlx::query("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn")
            .bind(&target)
            .fetch_one(&mut *replica)
            .await?
            .get(0);
        if caught_up {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

const SERVER_UPSERT: &str = "INSERT INTO dst (id, k, v, s, w) \
    SELECT id, k, v, s, v * 2 FROM src WHERE id % 3 <> 0 \
    ON CONFLICT (id) DO UPDATE SET k = excluded.k, v = excluded.v, s = excluded.s, w = excluded.w";

const HAND_SELECT: &str = "SELECT id, k, v, s FROM src WHERE id > $1 ORDER BY id LIMIT 5000";

const HAND_UPSERT: &str = "INSERT INTO dst (id, k, v, s, w) \
    SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::float8[], $4::text[], $5::float8[]) \
    ON CONFLICT (id) DO UPDATE SET k = excluded.k, v = excluded.v, s = excluded.s, w = excluded.w";

async fn connect(url: &str) -> anyhow::Result<PgConnection> {
    PgConnection::connect(url)
        .await
        .with_context(|| format!("connecting to {url} (run scripts/pg.sh up)"))
}

async fn execute(conn: &mut PgConnection, sql: &str) -> anyhow::Result<()> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .with_context(|| format!("running {sql}"))?;
    Ok(())
}

async fn count(conn: &mut PgConnection, table: &str) -> anyhow::Result<i64> {
    let sql = format!("SELECT count(*) FROM {table}");
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_one(&mut *conn)
        .await?
        .get(0))
}

/// Empties `dst` and everything a previous tidewater run left.
async fn reset(conn: &mut PgConnection) -> anyhow::Result<()> {
    execute(
        conn,
        "CREATE TABLE IF NOT EXISTS dst (id bigint PRIMARY KEY, k bigint, \
         v double precision, s text, w double precision)",
    )
    .await?;
    execute(conn, "TRUNCATE dst").await?;
    execute(conn, "DROP TABLE IF EXISTS tidewater_commits").await?;
    execute(conn, "DROP TABLE IF EXISTS tidewater_dead_letters").await?;
    execute(conn, "CHECKPOINT").await
}

/// Runs pg_backfill into the emptied `dst`; returns its seconds.
fn tidewater(args: &PgArgs, mode: &str, scratch: &Path) -> anyhow::Result<f64> {
    let started = Instant::now();
    let output = Command::new(crate::example_binary("pg_backfill")?)
        .args(["--source-url", &args.url, "--sink-mode", mode])
        .args(["--max-replica-lag", "off", "--checkpoint-interval", "1s"])
        .args(["--parallelism", &args.parallelism.to_string()])
        .arg("--state")
        .arg(scratch.join(format!("state-{mode}")))
        .env("RUST_LOG", "warn")
        .output()?;
    let seconds = started.elapsed().as_secs_f64();
    if !output.status.success() {
        bail!(
            "pg_backfill --sink-mode {mode} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(seconds)
}

/// The loop a user writes by hand; returns its seconds.
async fn hand_loop(conn: &mut PgConnection) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut last = i64::MIN;
    loop {
        let rows = sqlx::query(HAND_SELECT)
            .bind(last)
            .fetch_all(&mut *conn)
            .await?;
        let Some(tail) = rows.last() else { break };
        last = tail.get(0);
        let (mut ids, mut ks, mut vs, mut ss, mut ws) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for row in &rows {
            let id: i64 = row.get(0);
            if id % 3 == 0 {
                continue;
            }
            let v: f64 = row.get(2);
            ids.push(id);
            ks.push(row.get::<i64, _>(1));
            vs.push(v);
            ss.push(row.get::<String, _>(3));
            ws.push(v * 2.0);
        }
        sqlx::query(HAND_UPSERT)
            .bind(ids)
            .bind(ks)
            .bind(vs)
            .bind(ss)
            .bind(ws)
            .execute(&mut *conn)
            .await?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// `dst`'s rows in PostgreSQL's binary COPY format, read and transformed from `src`.
async fn copy_payload(conn: &mut PgConnection) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(512 << 20);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes()); // flags
    out.extend_from_slice(&0i32.to_be_bytes()); // header extension
    let rows = sqlx::query("SELECT id, k, v, s FROM src WHERE id % 3 <> 0 ORDER BY id")
        .fetch_all(&mut *conn)
        .await?;
    for row in rows {
        let (id, k, v, s): (i64, i64, f64, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        out.extend_from_slice(&5i16.to_be_bytes());
        for field in [id.to_be_bytes(), k.to_be_bytes(), v.to_be_bytes()] {
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&field);
        }
        out.extend_from_slice(&(s.len() as i32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(&8i32.to_be_bytes());
        out.extend_from_slice(&(v * 2.0).to_be_bytes());
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    Ok(out)
}

/// Raw binary COPY of `payload` into an empty copy of `dst`; returns its seconds.
async fn raw_copy(conn: &mut PgConnection, payload: &[u8]) -> anyhow::Result<f64> {
    execute(conn, "DROP TABLE IF EXISTS dst_copy").await?;
    execute(conn, "CREATE TABLE dst_copy (LIKE dst INCLUDING ALL)").await?;
    execute(conn, "CHECKPOINT").await?;
    let started = Instant::now();
    let mut copy = conn
        .copy_in_raw("COPY dst_copy FROM STDIN (FORMAT binary)")
        .await?;
    for chunk in payload.chunks(1 << 20) {
        copy.send(chunk).await?;
    }
    copy.finish().await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn server_upsert(conn: &mut PgConnection) -> anyhow::Result<f64> {
    let started = Instant::now();
    execute(conn, SERVER_UPSERT).await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Reads all of `src` in key order, 50,000 keys per request, decoding every
/// value: with row decoding (a keyset SELECT per batch, as the source reads)
/// or with `COPY (SELECT ...) TO STDOUT (FORMAT binary)` per key range.
/// Returns (seconds, rows, checksum).
async fn read_all(
    conn: &mut PgConnection,
    rows: i64,
    via_copy: bool,
) -> anyhow::Result<(f64, u64, i64)> {
    use futures::TryStreamExt;
    let started = Instant::now();
    let (mut count, mut checksum) = (0u64, 0i64);
    let step = 50_000i64;
    let mut low = -1i64;
    while low < rows {
        let high = low + step;
        if via_copy {
            let sql = format!(
                "COPY (SELECT id, k, v, s FROM src WHERE id > {low} AND id <= {high} ORDER BY id) \
                 TO STDOUT (FORMAT binary)"
            );
            let chunks: Vec<bytes::Bytes> = conn.copy_out_raw(&sql).await?.try_collect().await?;
            let data: Vec<u8> = chunks.concat();
            let mut at = 19; // signature, flags, extension length
            loop {
                let fields = i16::from_be_bytes([data[at], data[at + 1]]);
                at += 2;
                if fields < 0 {
                    break;
                }
                let take = |at: &mut usize| {
                    let len = i32::from_be_bytes(data[*at..*at + 4].try_into().unwrap());
                    *at += 4;
                    let field = &data[*at..*at + len.max(0) as usize];
                    *at += len.max(0) as usize;
                    field
                };
                let id = i64::from_be_bytes(take(&mut at).try_into()?);
                let k = i64::from_be_bytes(take(&mut at).try_into()?);
                let v = f64::from_be_bytes(take(&mut at).try_into()?);
                let s = std::str::from_utf8(take(&mut at))?;
                checksum = checksum.wrapping_add(id ^ k ^ v.to_bits() as i64 ^ s.len() as i64);
                count += 1;
            }
        } else {
            let batch = sqlx::query(
                "SELECT id, k, v, s FROM src WHERE id > $1 AND id <= $2 ORDER BY id LIMIT 50000",
            )
            .bind(low)
            .bind(high)
            .fetch_all(&mut *conn)
            .await?;
            for row in batch {
                let (id, k, v): (i64, i64, f64) = (row.get(0), row.get(1), row.get(2));
                let s: &str = row.get(3);
                checksum = checksum.wrapping_add(id ^ k ^ v.to_bits() as i64 ^ s.len() as i64);
                count += 1;
            }
        }
        low = high;
    }
    Ok((started.elapsed().as_secs_f64(), count, checksum))
}

const CONTENDERS: [&str; 5] = [
    "tidewater exactly-once",
    "tidewater upsert",
    "hand-written loop",
    "raw binary COPY",
    "server-side upsert",
];

pub fn pg_bench(args: PgArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut conn = runtime.block_on(connect(&args.url))?;
    let seeded = runtime
        .block_on(count(&mut conn, "src"))
        .unwrap_or_default();
    if seeded != args.rows as i64 {
        eprintln!("seeding src with {} rows (it holds {seeded})", args.rows);
        runtime.block_on(execute(&mut conn, "DROP TABLE IF EXISTS src"))?;
        let output = Command::new(crate::example_binary("pg_backfill")?)
            .args(["--source-url", &args.url, "--seed", &args.rows.to_string()])
            .env("RUST_LOG", "warn")
            .output()?;
        if !output.status.success() {
            bail!(
                "seeding failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        runtime.block_on(execute(&mut conn, "VACUUM ANALYZE src"))?;
    }
    // The source's read path: row decoding against binary COPY OUT (issue 3, item 1).
    for round in 0..2 {
        for via_copy in [round == 1, round == 0] {
            let (took, rows, checksum) =
                runtime.block_on(read_all(&mut conn, args.rows as i64, via_copy))?;
            eprintln!(
                "read {}: {took:.2} s, {:.0}k rows/s ({rows} rows, checksum {checksum})",
                if via_copy {
                    "binary COPY OUT"
                } else {
                    "keyset SELECT, row decoding"
                },
                rows as f64 / took / 1e3
            );
        }
    }
    let payload = runtime.block_on(copy_payload(&mut conn))?;
    let mut replica = match &args.replica_url {
        Some(url) => Some(runtime.block_on(connect(url))?),
        None => None,
    };
    let mut per_round: Vec<[f64; 5]> = Vec::new();
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); CONTENDERS.len()];
    let mut written = 0i64;
    let mut csv = String::from("round,contender,seconds,rows_per_second\n");
    for round in 0..args.repeat {
        per_round.push([0.0; 5]);
        for turn in 0..CONTENDERS.len() {
            let which = (turn + round) % CONTENDERS.len();
            let scratch = tempfile::tempdir_in(&args.out_dir)?;
            let took = runtime.block_on(async {
                reset(&mut conn).await?;
                catch_up(&mut conn, replica.as_mut()).await?;
                pause_replay(replica.as_mut()).await?;
                let took = match which {
                    0 => tidewater(&args, "exactly-once", scratch.path())?,
                    1 => tidewater(&args, "upsert", scratch.path())?,
                    2 => hand_loop(&mut conn).await?,
                    3 => raw_copy(&mut conn, &payload).await?,
                    _ => server_upsert(&mut conn).await?,
                };
                let table = if which == 3 { "dst_copy" } else { "dst" };
                written = count(&mut conn, table).await?;
                catch_up(&mut conn, replica.as_mut()).await?;
                anyhow::Ok(took)
            })?;
            let rate = written as f64 / took;
            eprintln!(
                "round {round}: {:<24} {took:>7.2} s  {:>6.0}k rows/s",
                CONTENDERS[which],
                rate / 1e3
            );
            csv += &format!("{round},{},{took:.3},{rate:.0}\n", CONTENDERS[which]);
            seconds[which].push(took);
            per_round[round][which] = took;
        }
    }
    for (round, took) in per_round.iter().enumerate() {
        println!(
            "round {round}: exactly-once / raw COPY {:.2}; exactly-once / hand loop {:.2}; \
             upsert / server-side upsert {:.2}",
            took[3] / took[0],
            took[2] / took[0],
            took[4] / took[1]
        );
    }
    std::fs::write(args.out_dir.join("pg.csv"), csv)?;
    let rates: Vec<f64> = seconds
        .iter_mut()
        .map(|s| written as f64 / median(s))
        .collect();
    println!(
        "| {}M-row src → {written} rows into dst, parallelism {} | median s | rows/s |",
        args.rows / 1_000_000,
        args.parallelism
    );
    println!("|---|---|---|");
    for (i, name) in CONTENDERS.iter().enumerate() {
        println!(
            "| {name} | {:.2} | {:.0}k |",
            written as f64 / rates[i],
            rates[i] / 1e3
        );
    }
    println!(
        "exactly-once / raw COPY {:.2} (target ≥ 0.6); exactly-once / hand loop {:.2} (target ≥ 2.5); \
         upsert / server-side upsert {:.2} (target ≥ 0.7)",
        rates[0] / rates[3],
        rates[0] / rates[2],
        rates[1] / rates[4]
    );
    Ok(())
}
