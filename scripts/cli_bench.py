#!/usr/bin/env python3
"""The copy job as a spec (`tidewater run`, SQL filter and computed column)
beside the backfill example's hand-written closures, alternating in one
invocation so that both see the same machine. Prints rows/s per run and the
ratio per round; writes results.csv under --out.

    python3 scripts/cli_bench.py --rows 200000000 --repeat 5 --out bench-results/cli

With `--against dead-letter` the other side is the same spec with a
`dead_letter` output on its SQL transform (no row fails): what setting rows
aside costs when there are none.
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import tempfile

SPEC = """
[job]
name = "bench-copy"
state = "{state}"
checkpoint_interval = "{interval}"
parallelism = {parallelism}

[sources.gen]
type = "generator"
rows = {rows}
keys = {keys}

[transforms.keep]
inputs = ["gen"]
type = "sql"
filter = "id % 3 <> 0"
columns = {{ w = "v * 2.0" }}{extra}

[sinks.out]
inputs = ["keep"]
type = "parquet"
path = "{out}"
"""


def run(command, summary):
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(summary) as f:
        s = json.load(f)
    return s["rows_read_in_run"] / s["elapsed_s"], s["cpu_s"], s["peak_rss_bytes"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=200_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--interval", default="1s")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="bench-results/cli")
    p.add_argument("--target", default="target/release")
    p.add_argument("--against", choices=["example", "dead-letter"], default="example")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    example = os.path.join(a.target, "examples", "backfill")
    cli = os.path.join(a.target, "tidewater")
    rows = []
    for round_ in range(a.repeat):
        measured = {}
        # Alternate who goes first, so that neither always gets the cooler machine.
        order = [a.against, "spec"] if round_ % 2 == 0 else ["spec", a.against]
        for which in order:
            work = tempfile.mkdtemp(prefix="tw-cli-bench-")
            state, out, summary = (os.path.join(work, n) for n in ("state", "out", "summary.json"))
            if which == "example":
                command = [example, "--mode", "copy", "--rows", str(a.rows), "--keys", str(a.keys),
                           "--parallelism", str(a.parallelism), "--checkpoint-interval", a.interval,
                           "--state", state, "--out", out, "--summary-json", summary]
            else:
                spec = os.path.join(work, "copy.toml")
                extra = ""
                if which == "dead-letter":
                    extra = '\ndead_letter = "{}"'.format(os.path.join(work, "dead"))
                with open(spec, "w") as f:
                    f.write(SPEC.format(state=state, out=out, rows=a.rows, keys=a.keys,
                                        parallelism=a.parallelism, interval=a.interval,
                                        extra=extra))
                command = [cli, "run", spec, "--progress", "off", "--summary-json", summary]
            measured[which] = run(command, summary)
            shutil.rmtree(work)
        other = a.against
        ratio = measured["spec"][0] / measured[other][0]
        print(f"round {round_}: {other} {measured[other][0] / 1e6:.2f}M rows/s, "
              f"spec {measured['spec'][0] / 1e6:.2f}M rows/s, ratio {ratio:.3f}", flush=True)
        rows.append([round_, *measured[other], *measured["spec"], ratio])
    with open(os.path.join(a.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        o = a.against.replace("-", "_")
        w.writerow(["round", f"{o}_rows_per_s", f"{o}_cpu_s", f"{o}_peak_rss",
                    "spec_rows_per_s", "spec_cpu_s", "spec_peak_rss", "ratio"])
        w.writerows(rows)
    ratios = [r[-1] for r in rows]
    print(f"spec / {a.against} rows/s: median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
