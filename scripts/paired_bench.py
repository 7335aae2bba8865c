#!/usr/bin/env python3
"""Checkpoint cost measured in concurrent pairs: two runs of the backfill
example's aggregate started at the same instant on the same machine, one
without checkpoints and one with, so that whatever the host does to one
(a neighbour's load, a slower memory, frequency changes) it does to the
other. Their CPU seconds (user + system from wait4, measured from outside)
are compared pair by pair.

    python3 scripts/paired_bench.py [--pairs off:off,off:10s] [--rounds 8]
        [--rows 639000000] [--keys 1000000] [--parallelism 2]

Each pair is A:B, two checkpoint intervals; B/A is reported per round, then
the median, mean and standard deviation. With --binary-b, B runs another
build: 20s:20s then compares two builds at the same interval. Run an off:off pair beside the
others: its spread is what the method cannot tell apart on this host (on
the host of docs/benchmarks.md, thirty-first session, a standard
deviation of 0.5-1.8% per round, against 5-10% for runs one after the
other).

Two runs share the machine, so each gets about half of it and runs about
twice as long as alone: an interval in time checkpoints about twice as
often per row as it would alone. The report therefore also gives the CPU
a checkpoint cost, (B - A) / B's checkpoints, and to compare with a run
alone, double the interval (20s here is about what 10s is alone).
Needs the release example: cargo build --release --example backfill
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn(binary, args, interval, folder):
    os.makedirs(folder)
    command = [
        binary, "--mode", "aggregate", "--rows", str(args.rows), "--keys", str(args.keys),
        "--parallelism", str(args.parallelism), "--checkpoint-interval", interval,
        "--state", os.path.join(folder, "state"), "--out", os.path.join(folder, "out"),
        "--summary-json", os.path.join(folder, "summary.json"),
    ]
    env = dict(os.environ, RUST_LOG="warn")
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def pair(binaries, args, a, b, first, work):
    """Starts A and B together (`first` is spawned first), each with its
    binary, and waits for both."""
    started = time.monotonic()
    order = [("a", a), ("b", b)] if first == "a" else [("b", b), ("a", a)]
    children = {}
    for tag, interval in order:
        folder = os.path.join(work, tag)
        shutil.rmtree(folder, ignore_errors=True)
        children[tag] = (spawn(binaries[tag], args, interval, folder), folder)
    results = {}
    # Reaped as they end, so that each one's wall time is its own.
    pending = {child.pid: tag for tag, (child, _) in children.items()}
    while pending:
        pid, status, usage = os.wait4(-1, 0)
        tag = pending.pop(pid, None)
        if tag is None:
            continue
        folder = children[tag][1]
        if status != 0:
            for other in pending:
                os.kill(other, 9)
            raise SystemExit(f"the {tag} run ({a if tag == 'a' else b}) failed ({status})")
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
        results[tag] = {
            "wall": time.monotonic() - started,
            "cpu": usage.ru_utime + usage.ru_stime,
            "peak_mib": usage.ru_maxrss / 1024,
            "checkpoints": sum(1 for c in summary["checkpoints"] if c["kind"] == "periodic"),
        }
        shutil.rmtree(folder)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="off:off,off:10s,off:20s",
                   help="comma-separated A:B checkpoint intervals, B measured against A")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--rows", type=int, default=639_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/examples/backfill"))
    p.add_argument("--binary-b", help="run B with this binary instead (two builds side by side: "
                   "pairs such as 10s:10s then measure one build's cost against the other's)")
    args = p.parse_args()
    binaries = {"a": args.binary, "b": args.binary_b or args.binary}
    pairs = []
    for spec in args.pairs.split(","):
        a, sep, b = spec.strip().partition(":")
        if not sep or not a or not b:
            raise SystemExit(f"--pairs: '{spec}' is not A:B, for example off:10s")
        pairs.append((a, b))
    for binary in set(binaries.values()):
        if not os.path.exists(binary):
            raise SystemExit(f"{binary} is missing: cargo build --release --example backfill")
    work = tempfile.mkdtemp(prefix="paired-bench-")
    rows = []
    try:
        for a, b in pairs:
            ratios, per_checkpoint = [], []
            for r in range(args.rounds):
                res = pair(binaries, args, a, b, "a" if r % 2 == 0 else "b", work)
                ratio = res["b"]["cpu"] / res["a"]["cpu"]
                ratios.append(ratio)
                if res["b"]["checkpoints"]:
                    per_checkpoint.append(
                        (res["b"]["cpu"] - res["a"]["cpu"]) / res["b"]["checkpoints"])
                print(f"{a}:{b} round {r + 1}: A cpu {res['a']['cpu']:.2f} s, wall "
                      f"{res['a']['wall']:.1f} s, peak {res['a']['peak_mib']:.0f} MiB | B cpu "
                      f"{res['b']['cpu']:.2f} s, wall {res['b']['wall']:.1f} s, peak "
                      f"{res['b']['peak_mib']:.0f} MiB, {res['b']['checkpoints']} checkpoints "
                      f"| B/A cpu {ratio:.4f}", flush=True)
            rows.append((a, b, ratios, per_checkpoint))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| A:B | B's interval alone | B/A CPU per round | median | mean ± sd "
          "| CPU per checkpoint, median |")
    print("|---|---|---|---|---|---|")
    for a, b, ratios, per_checkpoint in rows:
        listed = ", ".join(f"{x:.3f}" for x in ratios)
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        each = (f"{1000 * statistics.median(per_checkpoint):.0f} ms"
                if per_checkpoint else "–")
        print(f"| {a}:{b} | {alone(b)} | {listed} | {statistics.median(ratios):.4f} | "
              f"{statistics.mean(ratios):.4f} ± {sd:.4f} | {each} |")
    # The misreading this guards against happened: off:1s pairs were once
    # read against a target for 1 s alone.
    print("\nEach run of a pair gets about half the machine and runs about twice as long,\n"
          "so an interval here checkpoints about as often per row as half that interval\n"
          "in a run alone: read each pair against the target for its interval alone.")


def alone(interval):
    """The interval alone that `interval` in a pair is about (half of it)."""
    if interval == "off":
        return "off"
    for unit, ms in (("ms", 1), ("s", 1000), ("m", 60_000)):
        number = interval[:-len(unit)]
        if interval.endswith(unit) and number.replace(".", "", 1).isdigit():
            half = float(number) * ms / 2
            return f"≈ {half / 1000:g} s" if half >= 1000 else f"≈ {half:g} ms"
    return "?"


if __name__ == "__main__":
    main()
