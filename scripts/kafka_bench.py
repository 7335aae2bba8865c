#!/usr/bin/env python3
"""The Kafka connectors' throughput, as a user runs them (`tidewater run`,
release build) on the test broker (`bash scripts/kafka.sh up`):

1. generated rows published at least once, then exactly once, each into a
   fresh topic, alternating in one invocation so that both see the same
   machine: rows/s of each and the exactly-once / at-least-once ratio per
   round;
2. each topic replayed into Parquet (JSON decoded with a schema): rows/s.

    python3 scripts/kafka_bench.py --rows 2000000 --repeat 3

Needs TIDEWATER_KAFKA_BROKERS (from `bash scripts/kafka.sh env`).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile

from bench_run import run_spec

PUBLISH = """
[job]
name = "bench-publish"
state = "{dir}/state"
checkpoint_interval = "{interval}"
parallelism = 2

[sources.gen]
type = "generator"
rows = {rows}
keys = 100000

[sinks.out]
inputs = ["gen"]
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"
mode = "{mode}"
key = "id"
"""

REPLAY = """
[job]
name = "bench-replay"
state = "{dir}/state"
checkpoint_interval = "{interval}"
parallelism = 2

[sources.events]
type = "kafka"
brokers = "{brokers}"
topic = "{topic}"
format = "json"
schema = {{ id = "int64", k = "int64", v = "float64", s = "utf8" }}

[sinks.out]
inputs = ["events"]
type = "parquet"
path = "{dir}/out"
"""


def run(binary, spec_text, work):
    """Runs one spec in a fresh folder; returns its rows/s from the summary."""
    return run_spec(binary, spec_text, work)[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--interval", default="1s")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--binary", default="target/release/tidewater")
    a = p.parse_args()
    brokers = os.environ["TIDEWATER_KAFKA_BROKERS"]
    scratch = tempfile.mkdtemp(prefix="tw-kafka-bench-")
    results = {"at-least-once": [], "exactly-once": [], "replay": []}
    for round_ in range(a.repeat):
        modes = ["at-least-once", "exactly-once"]
        if round_ % 2:
            modes.reverse()
        rates = {}
        for mode in modes:
            topic = f"tw-bench-{os.getpid()}-{round_}-{mode}"
            subprocess.run(["bash", "scripts/kafka.sh", "topic", topic, str(a.partitions)], check=True)
            args = dict(dir=f"{scratch}/{mode}", interval=a.interval, rows=a.rows,
                        brokers=brokers, topic=topic, mode=mode)
            rates[mode] = run(a.binary, PUBLISH.format(**args), args["dir"])
            replay = dict(args, dir=f"{scratch}/replay")
            results["replay"].append(run(a.binary, REPLAY.format(**replay), replay["dir"]))
            print(f"round {round_ + 1}: {mode:13} {rates[mode] / 1e6:.3f}M rows/s published, "
                  f"replayed at {results['replay'][-1] / 1e6:.3f}M rows/s", flush=True)
        for mode in modes:
            results[mode].append(rates[mode])
        print(f"round {round_ + 1}: exactly-once / at-least-once = "
              f"{rates['exactly-once'] / rates['at-least-once']:.3f}", flush=True)
    ratios = [e / l for e, l in zip(results["exactly-once"], results["at-least-once"])]
    print(f"\n{a.rows} rows, {a.partitions} partitions, interval {a.interval}, parallelism 2, "
          f"medians of {a.repeat}:")
    for name in ("at-least-once", "exactly-once", "replay"):
        print(f"  {name:13} {statistics.median(results[name]) / 1e6:.3f}M rows/s")
    print(f"  exactly-once / at-least-once: median {statistics.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)})")
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
