#!/usr/bin/env bash
# A throwaway S3-compatible server on loopback, for tests: moto's server, from
# PyPI, one request at a time per object (scripts/s3_server.py says why). It
# implements what tidewater relies on: multipart uploads that a later
# process completes, and conditional writes (`If-None-Match: *` answered with
# 412), which the create-only checkpoint manifest uses.
#
#   bash scripts/s3.sh up     # install if missing, start, create the bucket
#   bash scripts/s3.sh env    # print the endpoint and credentials as exports
#   bash scripts/s3.sh down   # stop it (moto keeps everything in memory)
set -euo pipefail

port="${TIDEWATER_S3_PORT:-54339}"
bucket="${TIDEWATER_S3_BUCKET:-tidewater-test}"
dir="${TIDEWATER_S3_DIR:-/tmp/tidewater-s3}"
moto_version="5.2.1"

ready() {
  python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
    "http://127.0.0.1:$port/moto-api/" 2>/dev/null
}

install() {
  if python3 -c "import moto, flask_cors" 2>/dev/null; then return; fi
  echo "installing moto $moto_version (S3 server) from PyPI" >&2
  python3 -m pip install --quiet --disable-pip-version-check "moto[server]==$moto_version" >&2
}

up() {
  if ready; then
    echo "already running" >&2
  else
    install
    mkdir -p "$dir"
    nohup python3 "$(dirname "$0")/s3_server.py" 127.0.0.1 "$port" >"$dir/server.log" 2>&1 &
    echo $! >"$dir/server.pid"
    for _ in $(seq 1 80); do
      ready && break
      sleep 0.25
    done
    ready || { echo "the S3 server did not start; log:" >&2; tail -n 30 "$dir/server.log" >&2; return 1; }
  fi
  python3 - "$port" "$bucket" <<'PY'
import sys, boto3
port, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                  aws_access_key_id="tidewater", aws_secret_access_key="tidewater")
if bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
    s3.create_bucket(Bucket=bucket)
PY
}

env_() {
  cat <<ENV
export AWS_ENDPOINT=http://127.0.0.1:$port
export AWS_ALLOW_HTTP=true
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=tidewater
export AWS_SECRET_ACCESS_KEY=tidewater
export TIDEWATER_S3_BUCKET=$bucket
ENV
}

down() {
  if [[ -f $dir/server.pid ]]; then
    kill "$(cat "$dir/server.pid")" 2>/dev/null || true
    rm -f "$dir/server.pid"
  fi
}

case "${1:-}" in
  up) up ;;
  env) env_ ;;
  down) down ;;
  *) echo "usage: $0 up|env|down" >&2; exit 2 ;;
esac
