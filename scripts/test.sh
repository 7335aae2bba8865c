#!/usr/bin/env bash
# Every check and test of tidewater, starting whatever they need: what CI runs.
#
#   bash scripts/test.sh
#
# Needs the Rust toolchain (cargo, rustfmt, clippy), a C compiler and Python 3
# with pip, Node.js with npm, and Java 17 with Maven (Apache Kafka's jars come
# from Maven Central); installs PostgreSQL, openssl, tmux and chromium from
# Debian's packages, moto (an S3 server) and schemathesis (an API tester) from
# PyPI, and playwright-core (a browser driver) from the npm registry when
# missing, and starts a throwaway primary, streaming replica, S3 server and
# Kafka broker on loopback for the connector tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# No test may reach the cloud instance-metadata endpoint: an S3 URL without
# credentials is refused at once instead of looked up there.
export AWS_EC2_METADATA_DISABLED=true

# A CI clone is built once: incremental caches would only double the size of
# the target folder (they took 17 of 60 GiB on a long-lived one).
if [[ -n "${CI:-}" ]]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi

step "disk space"
# A cold build takes about 15 GiB and the tests' servers and files a few more;
# a full disk shows up much later as a confusing test failure, so say it here.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
for dir in "$target_dir" "${TMPDIR:-/tmp}"; do
  free_gib=$(df -P -k "$dir" | awk 'NR == 2 { print int($4 / 1048576) }')
  echo "$dir: $free_gib GiB free"
  if (( free_gib < 10 )); then
    echo "warning: less than 10 GiB free where $dir lives; the build and the tests may run out of space (cargo clean, or point CARGO_TARGET_DIR or TMPDIR at a larger volume)" >&2
  fi
done

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "test servers: PostgreSQL primary + streaming replica, S3, Apache Kafka"
trap 'bash scripts/pg.sh down; bash scripts/s3.sh down; bash scripts/kafka.sh down' EXIT
bash scripts/pg.sh up
eval "$(bash scripts/pg.sh env)"
export TIDEWATER_REQUIRE_PG=1
bash scripts/s3.sh up
eval "$(bash scripts/s3.sh env)"
export TIDEWATER_REQUIRE_S3=1
bash scripts/kafka.sh up
eval "$(bash scripts/kafka.sh env)"
export TIDEWATER_REQUIRE_KAFKA=1

step "a terminal for the progress bar's test: tmux"
if ! command -v tmux >/dev/null; then
  echo "installing tmux from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux
fi
export TIDEWATER_REQUIRE_TMUX=1

step "tests (unit, doc, end-to-end crash tests, PostgreSQL, S3, Kafka, a terminal)"
cargo test --workspace --all-features

step "the HTTP API against its OpenAPI document (schemathesis, 60 s)"
bash scripts/api-check.sh 60

step "the dashboard in a real browser (Debian's chromium, playwright-core)"
bash scripts/browser-check.sh

step "examples that check themselves"
# Built with the test step's selection, so that nothing is compiled again.
cargo build --quiet --workspace --all-features --example dedup
"${CARGO_TARGET_DIR:-target}/debug/examples/dedup"
