#!/usr/bin/env bash
# Reproduces the figures in docs/benchmarks.md (about an hour on 2 quiet cores).
#
#   bash scripts/bench.sh            # everything
#   bash scripts/bench.sh headline   # the interval study only
#   bash scripts/bench.sh matrix     # throughput and memory across modes, keys, parallelism
#   bash scripts/bench.sh micro      # criterion micro-benchmarks
#   bash scripts/bench.sh duckdb     # Parquet GROUP BY beside DuckDB (installs duckdb from PyPI)
#   bash scripts/bench.sh cli        # the copy job as a spec beside the backfill example,
#                                    # and beside itself with a dead-letter output
#   bash scripts/bench.sh incremental # 10M keys, 1% updated a second: incremental against full (~17 min), then the memory each needs (root, ~10 min)
#
# Results go to bench-results/ (CSV, plots); docs/benchmarks.md quotes them.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
out=bench-results
rows="${ROWS:-50000000}"
cargo build --release --examples -p tidewater-bench

bench() { cargo run --release --quiet -p tidewater-bench -- interval "$@"; }

if [[ $what == all || $what == headline ]]; then
  # Long runs (~25 s each at 60M rows/s): a 10 s interval checkpoints twice per run.
  bench --mode aggregate --rows "${INTERVAL_ROWS:-1500000000}" --keys 1000000 --parallelism 2 \
    --intervals "${INTERVALS:-off,1s,10s}" --repeat 5 --crashes 2 \
    --out-dir "$out/headline-aggregate-1m-p2" | tee "$out/headline.txt"
fi

if [[ $what == all || $what == matrix ]]; then
  mkdir -p "$out"
  : > "$out/matrix.txt"
  for mode in copy aggregate; do
    for keys in 100000 1000000; do
      for p in 1 2; do
        # 50M rows run for ~5 s: a 1 s interval checkpoints, a 10 s one would not.
        bench --mode "$mode" --rows "$rows" --keys "$keys" --parallelism "$p" \
          --intervals off,1s --repeat 3 --crashes 0 \
          --out-dir "$out/matrix-$mode-$keys-p$p" | tee -a "$out/matrix.txt"
      done
    done
  done
  # Memory must not grow with the input: copy mode at a fifth of the rows,
  # beside the p = 2 rows above.
  for keys in 100000 1000000; do
    bench --mode copy --rows $((rows / 5)) --keys "$keys" --parallelism 2 \
      --intervals off,1s --repeat 3 --crashes 0 \
      --out-dir "$out/memory-copy-small-$keys" | tee -a "$out/matrix.txt"
  done
fi

if [[ $what == all || $what == micro ]]; then
  cargo bench --bench hot_paths -- --noplot | tee "$out/micro.txt"
fi

if [[ $what == all || $what == duckdb ]]; then
  python3 -c "import duckdb" 2>/dev/null || python3 -m pip install --quiet duckdb
  mkdir -p "$out/duckdb"
  cargo run --release --quiet -p tidewater-bench -- duckdb --rows "$rows" --keys 1000000 \
    --parallelism 2 --duckdb-threads 2 --interval 1s --repeat 5 \
    --out-dir "$out/duckdb" | tee "$out/duckdb.txt"
fi

if [[ $what == all || $what == cli ]]; then
  # The spec's SQL filter and computed column against the example's closures.
  cargo build --release -p tidewater-cli --bin tidewater
  python3 scripts/cli_bench.py --rows "${CLI_ROWS:-200000000}" --repeat "${REPEAT:-5}" \
    --out "$out/cli" | tee "$out/cli.txt"
  # What a dead-letter output costs when no row fails.
  python3 scripts/cli_bench.py --rows "${CLI_ROWS:-200000000}" --repeat "${REPEAT:-5}" \
    --against dead-letter --out "$out/cli-dead-letter" | tee "$out/cli-dead-letter.txt"
fi

if [[ $what == all || $what == incremental ]]; then
  mkdir -p "$out"
  # Two minutes a run: its window spans a whole default chain (a base every 100).
  python3 scripts/incremental_bench.py --repeat "${REPEAT:-2}" | tee "$out/incremental.txt"
  # The memory a run needs, not what stays resident: cgroup limits, so root only.
  if [[ $(id -u) == 0 ]]; then
    python3 scripts/memory_floor.py --repeat "${REPEAT:-2}" | tee "$out/memory-floor.txt"
  else
    echo "memory_floor.py skipped: it sets cgroup memory limits, which needs root"
  fi
fi
