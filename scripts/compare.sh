#!/usr/bin/env bash
# Side-by-side throughput of two builds of the backfill example, interleaved
# so that machine noise hits both alike. Prints one line per run and the
# median ratio (new/old) of wall and CPU seconds per configuration.
#
#   bash scripts/compare.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Configurations: aggregate and copy mode, 1M keys, parallelism 2,
# checkpoints off and every 1 s. AGG_ROWS (default 300M) and COPY_ROWS
# (default 50M) set the sizes; ONLY=aggregate or ONLY=copy runs one mode.
set -euo pipefail
old="$1" new="$2" rounds="${3:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
run() { # binary mode rows interval -> "wall cpu maxrss_kib"
  rm -rf "$work/state" "$work/out"
  /usr/bin/time -f "%e %U %S %M" -o "$work/time" "$1" --mode "$2" --rows "$3" --keys 1000000 \
    --parallelism 2 --checkpoint-interval "$4" --state "$work/state" --out "$work/out" \
    > /dev/null 2>&1
  awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$work/time"
}
for config in "aggregate ${AGG_ROWS:-300000000} off" "aggregate ${AGG_ROWS:-300000000} 1s" \
              "copy ${COPY_ROWS:-50000000} off" "copy ${COPY_ROWS:-50000000} 1s"; do
  set -- $config
  [[ -n ${ONLY:-} && $1 != "$ONLY" ]] && continue
  : > "$work/ratios"
  for round in $(seq "$rounds"); do
    # Alternate which build goes first.
    if (( round % 2 )); then order="old new"; else order="new old"; fi
    for which in $order; do
      bin=$old; [[ $which == new ]] && bin=$new
      read -r wall cpu rss < <(run "$bin" "$1" "$2" "$3")
      echo "$1 rows=$2 interval=$3 round=$round $which wall=${wall}s cpu=${cpu}s peak=$((rss / 1024))MiB"
      echo "$round $which $wall $cpu" >> "$work/ratios"
    done
  done
  python3 - "$work/ratios" "$config" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, which, wall, cpu in rows:
    by.setdefault(r, {})[which] = (float(wall), float(cpu))
wall = [v["new"][0] / v["old"][0] for v in by.values()]
cpu = [v["new"][1] / v["old"][1] for v in by.values()]
print(f"== {sys.argv[2]}: new/old median wall {statistics.median(wall):.3f} "
      f"(rounds {', '.join(f'{x:.3f}' for x in wall)}), "
      f"cpu {statistics.median(cpu):.3f} (rounds {', '.join(f'{x:.3f}' for x in cpu)})")
PY
done
