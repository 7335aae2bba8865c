#!/usr/bin/env bash
# Every check and test of tidewater, starting whatever they need: what CI runs.
#
#   bash scripts/test.sh
#
# Needs the Rust toolchain (cargo, rustfmt, clippy) and a C compiler; installs
# PostgreSQL from Debian's packages when missing, and starts a throwaway
# primary and streaming replica on loopback for the connector tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "test servers: PostgreSQL primary + streaming replica"
bash scripts/pg.sh up
trap 'bash scripts/pg.sh down' EXIT
eval "$(bash scripts/pg.sh env)"
export TIDEWATER_REQUIRE_PG=1

step "tests (unit, doc, end-to-end crash tests, PostgreSQL)"
cargo test --workspace --all-features

step "examples that check themselves"
cargo run --quiet --example dedup
