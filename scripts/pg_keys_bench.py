#!/usr/bin/env python3
"""The PostgreSQL source's speed by key type and over TLS, as a user runs it
(`tidewater run`, release build) on the test primary (`bash scripts/pg.sh up`):

1. a table keyed by int8 and the same rows keyed by a uuid (md5 of the
   integer: no relation between key order and the heap's), each read into
   Parquet (the read side alone) and backfilled into a PostgreSQL table
   exactly once (read and write sides on one server); and the uuid rows
   stored in key order, read into Parquet (what the heap's order costs);
2. the int8 table read into Parquet without TLS and with verify-full TLS;
3. where the exactly-once backfill's time goes against a binary COPY load:
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
import os
import shutil
import statistics
import subprocess
import tempfile
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

    def job(template, table, url):
        def go(name):
            work = f"{scratch}/{name.replace(' ', '-')}"
            psql(plain, f"DROP TABLE IF EXISTS {table}_dst")
            return run(a.binary, template.format(name=name.replace(" ", "-"), dir=work,
                                                 interval=a.interval, url=url, table=table,
                                                 rows=a.rows), work)
        return go

    def write_side(name):
        psql(plain, "DROP TABLE IF EXISTS gen_dst")
        work = f"{scratch}/write"
        rate = run(a.binary, WRITE.format(dir=work, interval=a.interval, url=plain, rows=a.rows), work)
        if not os.path.exists(gen_file):
            psql(plain, f"COPY gen_dst TO '{gen_file}' (FORMAT binary)")
        return rate

    contenders = {
        "read int8": job(READ, "src_int", plain),
        "read uuid": job(READ, "src_uuid", plain),
        "read uuid sorted": job(READ, "src_uuid_sorted", plain),
        "read int8 TLS": job(READ, "src_int", tls),
        "backfill int8": job(BACKFILL, "src_int", plain),
        "backfill uuid": job(BACKFILL, "src_uuid", plain),
        "write only": write_side,
        "server COPY src": lambda _: (server_copy(plain, "copy_src", "src_int", src_file), 0.0),
        "server COPY gen": lambda _: (server_copy(plain, "copy_gen", "gen_like", gen_file), 0.0),
    }
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
                print(f"round {round_ + 1}: {name:17} {rate / 1e6:.3f}M rows/s ({cpu:.1f} CPU s in the job)",
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
        print(f"  {name:17} {statistics.median(rates[name]) / 1e6:.3f}M rows/s")
    for label, x, y in (("uuid / int8, read", "read uuid", "read int8"),
                        ("uuid / int8, backfill", "backfill uuid", "backfill int8"),
                        ("uuid in key order / int8, read", "read uuid sorted", "read int8"),
                        ("TLS / plain, read", "read int8 TLS", "read int8"),
                        ("backfill / server COPY", "backfill int8", "server COPY src"),
                        ("write only / server COPY", "write only", "server COPY gen")):
        r = ratios(x, y)
        print(f"  {label:31} median {statistics.median(r):.3f} ({', '.join(f'{v:.3f}' for v in r)})")


if __name__ == "__main__":
    main()
