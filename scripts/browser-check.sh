#!/usr/bin/env bash
# The dashboard in a real browser: starts a rate-limited job with
# `tidewater run --http --http-token`, drives Debian's chromium headless with
# playwright-core (tests/browser/dashboard.mjs), and checks the run ended
# cancelled. Screenshots go to target/artifacts/dashboard/ (or
# $TIDEWATER_ARTIFACTS/dashboard/); with --docs they are also copied to
# docs/images/, where docs/operations.md shows them.
#
#   bash scripts/browser-check.sh [--docs]
#
# Installs chromium from Debian's packages and playwright-core from the npm
# registry (into the user's cache folder) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

playwright="1.65.1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tidewater/playwright-core-$playwright"
if ! command -v chromium >/dev/null; then
  echo "installing chromium from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [[ ! -d $cache/node_modules/playwright-core ]]; then
  echo "installing playwright-core $playwright from the npm registry into $cache" >&2
  mkdir -p "$cache"
  npm install --silent --no-save --no-package-lock --no-audit --no-fund \
    --prefix "$cache" "playwright-core@$playwright"
fi

source scripts/lib.sh
bin="$(tidewater_binary)"
artifacts="${TIDEWATER_ARTIFACTS:-$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/artifacts}/dashboard"
mkdir -p "$artifacts"
rm -f "$artifacts"/*.png
scratch_with_cleanup
# Below the kernel's ephemeral range (32768-60999 here): the API check's
# thousands of client connections just before can leave one on a port in it.
port="${TIDEWATER_BROWSER_CHECK_PORT:-31372}"
token="dashboard-check-$(date +%s%N)"

# First a job that fails (its error budget of 10 bad rows runs out), so the
# store has an error for the page to show; then the job the test watches.
sed -e "s|@DIR@|$work/over-budget|g" -e 's/"dashboard-demo"/"dashboard-over-budget"/' \
  -e 's/max_bad_rows = 100_000/max_bad_rows = 10/' tests/browser/dashboard.toml >"$work/fails.toml"
if "$bin" run "$work/fails.toml" --store "sqlite://$work/jobs.sqlite" --progress off \
  >"$work/fails.log" 2>&1; then
  echo "the over-budget job did not fail; its log:" >&2
  tail -n 20 "$work/fails.log" >&2
  exit 1
fi
sed "s|@DIR@|$work|g" tests/browser/dashboard.toml >"$work/job.toml"
TIDEWATER_HTTP_TOKEN="$token" "$bin" run "$work/job.toml" --store "sqlite://$work/jobs.sqlite" \
  --http "127.0.0.1:$port" --http-linger 10s >"$work/run.log" 2>&1 &
pid=$!

cp tests/browser/dashboard.mjs "$work/"
ln -s "$cache/node_modules" "$work/node_modules"
node "$work/dashboard.mjs" "http://127.0.0.1:$port" "$token" "$artifacts" || {
  echo "the dashboard check failed; the run's log:" >&2
  tail -n 30 "$work/run.log" >&2
  exit 1
}
status=0
wait "$pid" || status=$?
pid=
if [[ $status -ne 3 ]]; then
  echo "the run exited $status, not 3 (cancelled); its log:" >&2
  tail -n 30 "$work/run.log" >&2
  exit 1
fi
echo "dashboard: the run ended cancelled (exit 3); screenshots in $artifacts"
if [[ ${1:-} == --docs ]]; then
  mkdir -p docs/images
  for shot in jobs job-mid-run job-cancelled job-failed job-phone; do
    cp "$artifacts/$shot.png" "docs/images/dashboard-$shot.png"
  done
  echo "copied to docs/images/"
fi
