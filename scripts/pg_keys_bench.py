#!/usr/bin/env python3
"""The PostgreSQL source's speed by key type and over TLS, as a user runs it
(`tidewater run`, release build) on the test primary (`bash scripts/pg.sh up`):

1. a table keyed by int8 and the same rows keyed by a uuid (md5 of the
   integer: no relation between key order and the heap's), each read into
   Parquet (the read side alone) and backfilled into a PostgreSQL table
   exactly once (read and write sides on one server); and the uuid rows
   stored in key order, read into Parquet (what the heap's order costs);
2. the int8 table read into Parquet without TLS and with verify-full TLS;
3. the same reads by a reference client (psql, libpq and OpenSSL), two
   connections each copying half the keys in key order through the primary
   key's index (`COPY (SELECT ... ORDER BY id) TO STDOUT (FORMAT binary)`):
   how fast the server itself hands the rows over, by key type and over
   TLS, with no tidewater in the way;
4. where the exactly-once backfill's time goes against a binary COPY load:
   the write side alone (generated rows into PostgreSQL exactly once) and
   the server loading the same rows from a binary COPY file of its own
   (`COPY t FROM 'file' (FORMAT binary)`: no client at all), and the
   backfill against the server loading the source's rows the same way.

Contenders alternate within each round (their order rotates), so each
ratio compares runs made minutes apart on the same machine; the replica's
replay is paused meanwhile (it would compete for the same two cores).

    python3 scripts/pg_keys_bench.py --rows 10000000 --repeat 3

Needs TIDEWATER_PG_PRIMARY, TIDEWATER_PG_REPLICA and TIDEWATER_PG_TLS_DIR
(from `bash scripts/pg.sh env`) and psql.
"""
import argparse
import functools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse

from bench_run import run_spec

DATABASE = "tw_bench_keys"

# A job reading `{table}` by its key `id`; the sink is appended.
SOURCE = """
[job]
name = "bench-{name}-{{run}}"
state = "{dir}/state"
checkpoint_interval = "{interval}"
parallelism = 2

[sources.src]
type = "postgres"
url = "{url}"
table = "{table}"
key = "id"
"""

READ = SOURCE + """
[sinks.out]
inputs = ["src"]
type = "parquet"
path = "{dir}/out"
"""

BACKFILL = SOURCE + """
[sinks.out]
inputs = ["src"]
type = "postgres"
url = "{url}"
table = "{table}_dst"
mode = "exactly-once"
create = "CREATE TABLE IF NOT EXISTS {table}_dst (LIKE {table})"
"""

WRITE = """
[job]
name = "bench-write-{{run}}"
state = "{dir}/state"
checkpoint_interval = "{interval}"
parallelism = 2

[sources.gen]
type = "generator"
rows = {rows}
keys = 100000

[sinks.out]
inputs = ["gen"]
type = "postgres"
url = "{url}"
table = "gen_dst"
mode = "exactly-once"
create = "CREATE TABLE IF NOT EXISTS gen_dst (id int8, k int8, v float8, s text)"
"""


def psql(url, sql):
    out = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-XAtqc", sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def with_database(url, database, query=""):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + database, query=query))


def seed(url, rows):
    """src_int and src_uuid with `rows` rows each (kept between invocations)."""
    for table, key in (("src_int", "i::int8"), ("src_uuid", "md5(i::text)::uuid")):
        kind = "int8" if table == "src_int" else "uuid"
        exists = psql(url, f"SELECT count(*) FROM pg_class WHERE relname = '{table}'") == "1"
        if exists and psql(url, f"SELECT count(*) FROM {table}") == str(rows):
            continue
        print(f"seeding {table} with {rows} rows", flush=True)
        psql(url, f"DROP TABLE IF EXISTS {table}; "
                  f"CREATE TABLE {table} (id {kind} PRIMARY KEY, n int8, v float8, s text); "
                  f"INSERT INTO {table} SELECT {key}, i, (i % 1000) / 4.0, md5(i::text) "
                  f"FROM generate_series(1, {rows}) i")
        psql(url, f"VACUUM ANALYZE {table}")
    # The uuid rows again, stored in key order: what heap order costs.
    exists = psql(url, "SELECT count(*) FROM pg_class WHERE relname = 'src_uuid_sorted'") == "1"
    if not exists or psql(url, "SELECT count(*) FROM src_uuid_sorted") != str(rows):
        print("seeding src_uuid_sorted", flush=True)
        psql(url, "DROP TABLE IF EXISTS src_uuid_sorted; "
                  "CREATE TABLE src_uuid_sorted AS SELECT * FROM src_uuid ORDER BY id; "
                  "ALTER TABLE src_uuid_sorted ADD PRIMARY KEY (id)")
        psql(url, "VACUUM ANALYZE src_uuid_sorted")


def middle_key(url, table, rows):
    """The key that splits `table` in two halves (as the reference reads it)."""
    return psql(url, f"SELECT id FROM {table} ORDER BY id OFFSET {rows // 2} LIMIT 1")


def libpq_read(url, table, middle, rows):
    """The reference client: two psql processes at once, each copying half
    of `table` in key order (through the index, as keyset pages read it) to
    /dev/null. Returns (rows/s, their user + system CPU s)."""
    halves = (f"id <= '{middle}'", f"id > '{middle}'")
    env = dict(os.environ, PGOPTIONS="-c enable_seqscan=off -c enable_bitmapscan=off -c enable_sort=off")
    before, start = os.times(), time.monotonic()
    readers = [subprocess.Popen(["psql", url, "-v", "ON_ERROR_STOP=1", "-XAtq", "-c",
                                 f"\\copy (SELECT * FROM {table} WHERE {half} ORDER BY id) "
                                 "TO '/dev/null' WITH (FORMAT binary)"], env=env)
               for half in halves]
    if any(r.wait() != 0 for r in readers):
        raise SystemExit(f"the reference read of {table} failed")
    elapsed, after = time.monotonic() - start, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return rows / elapsed, cpu


RUNS = iter(range(1 << 30))


def run(binary, spec_text, work):
    """Runs one spec (see bench_run.run_spec); every run is a new job (its
    name numbered): the exactly-once sink's commit rows of an earlier job of
    the same name would fence it."""
    return run_spec(binary, spec_text.replace("{run}", f"{os.getpid()}-{next(RUNS)}"), work)


def server_copy(url, table, like, path):
    """The server loading `path` (binary COPY) into a fresh `table`: rows/s."""
    psql(url, f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (LIKE {like})")
    out = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-XAtq",
                          "-c", "\\timing on", "-c", f"COPY {table} FROM '{path}' (FORMAT binary)"],
                         check=True, capture_output=True, text=True).stdout
    ms = float(out.split("Time:")[1].split("ms")[0])
    rows = int(psql(url, f"SELECT count(*) FROM {table}"))
    psql(url, f"DROP TABLE {table}")
    return rows / (ms / 1000)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--interval", default="10s")
    p.add_argument("--binary", default="target/release/tidewater")
    p.add_argument("--other", help="a second `tidewater` binary: its int8 reads, plain and over "
                                   "TLS, run beside this one's in every round (contenders `other: ...`)")
    p.add_argument("--only", help="comma-separated contenders to run (default: all)")
    a = p.parse_args()
    primary = os.environ["TIDEWATER_PG_PRIMARY"]
    replica = os.environ.get("TIDEWATER_PG_REPLICA")
    ca = os.path.join(os.environ["TIDEWATER_PG_TLS_DIR"], "ca.crt")
    if psql(primary, f"SELECT count(*) FROM pg_database WHERE datname = '{DATABASE}'") == "0":
        psql(primary, f"CREATE DATABASE {DATABASE}")
    plain = with_database(primary, DATABASE, "sslmode=disable")
    port = urllib.parse.urlsplit(primary).port
    tls = f"postgres://postgres@localhost:{port}/{DATABASE}?sslmode=verify-full&sslrootcert={ca}"
    seed(plain, a.rows)
    if replica:
        psql(replica, "SELECT pg_wal_replay_pause()")
    scratch = tempfile.mkdtemp(prefix="tw-pg-keys-bench-")
    # Binary COPY files the server loads itself (in its own data folder's
    # parent, which the server's user can read): the source's rows, and the
    # generator's (written once through the exactly-once sink).
    files = tempfile.mkdtemp(prefix="tw-pg-copy-", dir="/tmp")
    os.chmod(files, 0o777)
    src_file, gen_file = f"{files}/src_int.bin", f"{files}/gen.bin"
    psql(plain, f"COPY src_int TO '{src_file}' (FORMAT binary)")

    def job(template, table, url, binary=a.binary):
        def go(name):
            slug = name.replace(" ", "-").replace(":", "")
            work = f"{scratch}/{slug}"
            psql(plain, f"DROP TABLE IF EXISTS {table}_dst")
            return run(binary, template.format(name=slug, dir=work, interval=a.interval,
                                               url=url, table=table, rows=a.rows), work)
        return go

    def write_side(name):
        psql(plain, "DROP TABLE IF EXISTS gen_dst")
        work = f"{scratch}/write"
        rate = run(a.binary, WRITE.format(dir=work, interval=a.interval, url=plain, rows=a.rows), work)
        if not os.path.exists(gen_file):
            psql(plain, f"COPY gen_dst TO '{gen_file}' (FORMAT binary)")
        return rate

    # Found when a reference read first needs it: at 10M uuids the lookup
    # walks half the index, wasted when --only leaves the reference out.
    middle = functools.cache(lambda table: middle_key(plain, table, a.rows))

    def reference(table, url):
        return lambda _: libpq_read(url, table, middle(table), a.rows)

    contenders = {
        "read int8": job(READ, "src_int", plain),
        "read uuid": job(READ, "src_uuid", plain),
        "read uuid sorted": job(READ, "src_uuid_sorted", plain),
        "read int8 TLS": job(READ, "src_int", tls),
        "libpq int8": reference("src_int", plain),
        "libpq uuid": reference("src_uuid", plain),
        "libpq int8 TLS": reference("src_int", tls),
        "backfill int8": job(BACKFILL, "src_int", plain),
        "backfill uuid": job(BACKFILL, "src_uuid", plain),
        "write only": write_side,
        "server COPY src": lambda _: (server_copy(plain, "copy_src", "src_int", src_file), 0.0),
        "server COPY gen": lambda _: (server_copy(plain, "copy_gen", "gen_like", gen_file), 0.0),
    }
    if a.other:
        contenders["other: read int8"] = job(READ, "src_int", plain, a.other)
        contenders["other: read int8 TLS"] = job(READ, "src_int", tls, a.other)
    if a.only:
        wanted = a.only.split(",")
        unknown = [n for n in wanted if n not in contenders]
        if unknown:
            raise SystemExit(f"unknown contenders {unknown}; choose from {list(contenders)}")
        contenders = {n: contenders[n] for n in wanted}
    if "write only" in contenders or "server COPY gen" in contenders:
        # One unmeasured write makes the generator's COPY file (and warms up).
        write_side("warm-up")
        psql(plain, "DROP TABLE IF EXISTS gen_like; CREATE TABLE gen_like (LIKE gen_dst)")
    rates = {name: [] for name in contenders}
    try:
        for round_ in range(a.repeat):
            names = list(contenders)
            names = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in names:
                rate, cpu = contenders[name](name)
                rates[name].append(rate)
                print(f"round {round_ + 1}: {name:20} {rate / 1e6:.3f}M rows/s ({cpu:.1f} CPU s in the job)",
                      flush=True)
                psql(plain, "CHECKPOINT")
            psql(plain, "DROP TABLE IF EXISTS src_int_dst; DROP TABLE IF EXISTS src_uuid_dst; "
                        "DROP TABLE IF EXISTS gen_dst")
            if replica:
                psql(replica, "SELECT pg_wal_replay_resume()")
                psql(replica, "SELECT pg_wal_replay_pause()")
    finally:
        if replica:
            psql(replica, "SELECT pg_wal_replay_resume()")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(files, ignore_errors=True)

    def ratios(a_name, b_name):
        return [x / y for x, y in zip(rates[a_name], rates[b_name])]

    print(f"\n{a.rows} rows, interval {a.interval}, parallelism 2, medians of {a.repeat}:")
    for name in contenders:
        print(f"  {name:20} {statistics.median(rates[name]) / 1e6:.3f}M rows/s")
    for label, x, y in (("uuid / int8, read", "read uuid", "read int8"),
                        ("uuid / int8, backfill", "backfill uuid", "backfill int8"),
                        ("uuid in key order / int8, read", "read uuid sorted", "read int8"),
                        ("TLS / plain, read", "read int8 TLS", "read int8"),
                        ("uuid / int8, libpq", "libpq uuid", "libpq int8"),
                        ("TLS / plain, libpq", "libpq int8 TLS", "libpq int8"),
                        ("read int8 / libpq int8", "read int8", "libpq int8"),
                        ("TLS / plain, read, other", "other: read int8 TLS", "other: read int8"),
                        ("other / this, read TLS", "other: read int8 TLS", "read int8 TLS"),
                        ("other / this, read plain", "other: read int8", "read int8"),
                        ("backfill / server COPY", "backfill int8", "server COPY src"),
                        ("write only / server COPY", "write only", "server COPY gen")):
        if x not in rates or y not in rates:
            continue
        r = ratios(x, y)
        print(f"  {label:31} median {statistics.median(r):.3f} ({', '.join(f'{v:.3f}' for v in r)})")


if __name__ == "__main__":
    main()
