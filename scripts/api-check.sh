#!/usr/bin/env bash
# The HTTP API against its own OpenAPI document: schemathesis (a
# property-based API tester, from PyPI) sends generated requests to a live
# `tidewater serve` for a bounded time and checks every answer against the
# document (status codes, content types, schemas) and for server errors.
#
#   bash scripts/api-check.sh [SECONDS]     # default 60
#
# Installs schemathesis into a virtualenv under the user's cache folder when
# missing; needs the debug `tidewater` binary (cargo builds it).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
version="4.32.5"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tidewater/schemathesis-$version"
if [[ ! -x $venv/bin/schemathesis ]]; then
  echo "installing schemathesis $version from PyPI into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi

source scripts/lib.sh
bin="$(tidewater_binary)"
scratch_with_cleanup
# Below the kernel's ephemeral range (32768-60999 here): no client
# connection of the steps before can hold it when the server binds.
port="${TIDEWATER_API_CHECK_PORT:-31371}"

(cd "$work" && exec "$bin" serve --store "sqlite://$work/jobs.sqlite" \
  --http "127.0.0.1:$port") >"$work/serve.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$port"
ready() {
  python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
    "$base/api/v1/openapi.json" 2>/dev/null
}
for _ in $(seq 1 100); do
  ready && break
  sleep 0.1
done
ready || { echo "serve did not start; log:" >&2; cat "$work/serve.log" >&2; exit 1; }
# One real job, so that reads of an existing id are exercised too.
python3 - "$base/api/v1/jobs" examples/specs/copy.toml <<'PY'
import sys, urllib.request
with open(sys.argv[2], "rb") as spec:
    request = urllib.request.Request(sys.argv[1], data=spec.read(), method="POST")
    assert urllib.request.urlopen(request, timeout=10).status == 202
PY

check() {
  # From the scratch folder: schemathesis keeps a cache in its working folder.
  (cd "$work" && "$venv/bin/schemathesis" run "$base/api/v1/openapi.json" \
    --workers 1 --request-timeout 10 --seed 20261201 \
    --suppress-health-check all --warnings off "$@") || {
    echo "schemathesis found answers that break the API's document; serve's log:" >&2
    tail -n 40 "$work/serve.log" >&2
    exit 1
  }
}
# Every operation with every check but submitting; then submitting, whose
# body's validity is beyond what a schema can say (a TOML document that
# `tidewater validate` accepts): a schema-valid body that is not a spec is
# rightly a 400, so that one check is left out there.
check --max-time "$((seconds * 2 / 3))" --exclude-name "POST /api/v1/jobs"
check --max-time "$((seconds / 3))" --include-name "POST /api/v1/jobs" \
  --exclude-checks positive_data_acceptance
