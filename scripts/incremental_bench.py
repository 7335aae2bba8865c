#!/usr/bin/env python3
"""Incremental checkpoints on a large keyed state that changes a little:
the backfill example's aggregate over 10M keys, first built up at full
speed, then fed at a rate that updates about 1% of the keys per second,
checkpointing every second, with and without incremental checkpoints.

    python3 scripts/incremental_bench.py [--keys 10000000] [--repeat 3] [--only off,...]
        [--binary BUILD] [--binary-b OTHER_BUILD]

Each round runs every configuration once (the order rotates per round).
Per run: the bytes each checkpoint wrote (mean and median over the last
--tail checkpoints, all after the build-up; the default window holds 100
checkpoints, so an incremental run's mean includes the base its chain
starts over with every 100), the process's CPU seconds
(user + system from wait4, measured from outside) and peak memory. The
checkpoint cost is the CPU a second over the same round's run without
checkpoints, as a share of the machine (2 cores), sampled from /proc while
the rate holds (from --window-start to 3 s before the end); each peak is
also given against the same round's off. With --binary-b, every
configuration but off runs with a second build too, in the same rounds,
to compare two builds side by side. Needs the release example:
cargo build --release --example backfill
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
# key + count + sum + max, 8 bytes each: the logical size of a key's state.
ROW_BYTES = 32


def command(binary, args, config, work):
    """The backfill run of this workload in a fresh `work` folder, with its
    summary file; `args` has keys, warmup_rows, rate and seconds."""
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    summary = os.path.join(work, "summary.json")
    return [
        binary, "--mode", "aggregate", "--keys", str(args.keys),
        "--rows", str(args.warmup_rows + args.rate * args.seconds),
        "--rows-per-second", str(args.rate), "--throttle-after-rows", str(args.warmup_rows),
        "--parallelism", "2", "--state", os.path.join(work, "state"),
        "--out", os.path.join(work, "out"), "--summary-json", summary,
    ] + config, summary


def run(binary, args, config, work):
    command_line, summary = command(binary, args, config, work)
    started = time.monotonic()
    child = subprocess.Popen(command_line, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The process's CPU seconds over time, read from outside, to measure
    # the rate phase alone (the build-up's CPU varies more than the cost).
    samples = []
    while True:
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
            ticks = int(fields[11]) + int(fields[12])
            samples.append((time.monotonic() - started, ticks / os.sysconf("SC_CLK_TCK")))
        except (OSError, IndexError, ValueError):
            pass
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            break
        time.sleep(0.25)
    wall = time.monotonic() - started
    child.returncode = status
    if status != 0:
        raise SystemExit(f"{' '.join(command_line)} failed ({status})")
    with open(summary) as f:
        s = json.load(f)
    shutil.rmtree(work)
    periodic = [c for c in s["checkpoints"] if c["kind"] == "periodic"][-args.tail:]
    # The rate phase without its first and last seconds (the end writes
    # the output); the build-up ends well before --window-start.
    window = [(t, c) for t, c in samples if args.window_start <= t <= wall - 3]
    if len(window) < 2:
        raise SystemExit(f"run too short for the window: {wall:.1f} s")
    (t0, c0), (t1, c1) = window[0], window[-1]
    return {
        "wall": wall,
        "rate_cpu": (c1 - c0) / (t1 - t0),
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
        "bytes": [c["state_bytes"] for c in periodic],
    }


# The configurations compared, by name: the backfill's flags.
CONFIGS = {
    "off": ["--checkpoint-interval", "off"],
    "1s full": ["--checkpoint-interval", "1s"],
    "1s incremental": ["--checkpoint-interval", "1s", "--incremental"],
    "1s incremental (base every 20)": [
        "--checkpoint-interval", "1s", "--incremental", "--full-checkpoint-every", "20"],
}


def workload_arguments(p, seconds):
    """The workload's options, which `command` reads, and the two builds'."""
    p.add_argument("--keys", type=int, default=10_000_000)
    p.add_argument("--warmup-rows", type=int, default=100_000_000)
    p.add_argument("--rate", type=int, default=100_000, help="rows/s after the build-up")
    p.add_argument("--seconds", type=int, default=seconds, help="seconds at that rate")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/examples/backfill"))
    p.add_argument("--binary-b", help="a second build: every configuration but off also runs "
                   "with it, in the same rounds, marked (B)")


def chosen(only):
    """The configurations `only` names (comma-separated; all when empty),
    in CONFIGS order, off always among them."""
    names = list(CONFIGS)
    if not only:
        return names
    wanted = {"off"} | {n.strip() for n in only.split(",")}
    unknown = wanted - set(CONFIGS)
    if unknown:
        raise SystemExit(f"--only: no configuration {sorted(unknown)}; there are {names}")
    return [n for n in names if n in wanted]


def runs_of(names, args):
    """What each named run starts, its build and its flags: `names` with
    --binary, and with --binary-b every one but off again, marked (B)."""
    runs = {n: (args.binary, CONFIGS[n]) for n in names}
    if args.binary_b:
        runs.update({f"{n} (B)": (args.binary_b, CONFIGS[n]) for n in names if n != "off"})
        print(f"A: {args.binary}\nB: {args.binary_b}", flush=True)
    return runs


def rotated(names, r):
    """The order of round `r`: each run starts the rounds in turn."""
    k = r % len(names)
    return names[k:] + names[:k]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    workload_arguments(p, seconds=115)
    p.add_argument("--tail", type=int, default=100, help="checkpoints measured, the last ones")
    p.add_argument("--window-start", type=float, default=15.0,
                   help="seconds into a run where the CPU measurement starts")
    p.add_argument("--only", help="comma-separated configurations to run (off is always run)")
    args = p.parse_args()
    runs = runs_of(chosen(args.only), args)
    names = list(runs)
    results = {n: [] for n in names}
    work = tempfile.mkdtemp(prefix="incremental-bench-")
    for r in range(args.repeat):
        for name in rotated(names, r):
            binary, flags = runs[name]
            res = run(binary, args, flags, os.path.join(work, "run"))
            results[name].append(res)
            mean = statistics.mean(res["bytes"]) if res["bytes"] else 0
            print(f"round {r + 1} {name}: wall {res['wall']:.1f} s, cpu {res['cpu']:.2f} s "
                  f"({res['rate_cpu']:.3f} CPU s/s at the rate), "
                  f"peak {res['peak_mib']:.0f} MiB, bytes/checkpoint mean {mean / 1e6:.2f} MB "
                  f"over {len(res['bytes'])}", flush=True)
    updated = args.rate * ROW_BYTES
    print(f"\nkeys updated per checkpoint: at most {args.rate} ({updated / 1e6:.1f} MB logical); "
          f"whole state {args.keys} keys ({args.keys * ROW_BYTES / 1e6:.0f} MB logical)")
    print("| configuration | bytes/checkpoint, mean (median) | mean / updated keys' logical size "
          "| CPU at the rate over off, share of 2 cores, per round | median | peak MiB "
          "| peak of off, per round |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        runs = results[name]
        all_bytes = [b for res in runs for b in res["bytes"]]
        shares = [(res["rate_cpu"] - off["rate_cpu"]) / 2
                  for res, off in zip(runs, results["off"])]
        b = (f"{statistics.mean(all_bytes) / 1e6:.2f} MB ({statistics.median(all_bytes) / 1e6:.2f})"
             if all_bytes else "–")
        ratio = f"{statistics.mean(all_bytes) / updated:.2f}x" if all_bytes else "–"
        share = ", ".join(f"{100 * s:+.2f}%" for s in shares) if name != "off" else "–"
        med = f"{100 * statistics.median(shares):+.2f}%" if name != "off" else "–"
        peak = ", ".join(f"{res['peak_mib']:.0f}" for res in runs)
        of_off = (", ".join(f"{res['peak_mib'] / off['peak_mib']:.2f}x"
                            for res, off in zip(runs, results["off"]))
                  if name != "off" else "–")
        print(f"| {name} | {b} | {ratio} | {share} | {med} | {peak} | {of_off} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
