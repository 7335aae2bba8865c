#!/usr/bin/env bash
# Every check and test of tidewater, starting whatever they need: what CI runs.
#
#   bash scripts/test.sh
#
# Needs only the Rust toolchain (cargo, rustfmt, clippy) and a C compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "tests (unit, doc, end-to-end crash tests)"
cargo test --workspace --all-features

step "examples that check themselves"
cargo run --quiet --example dedup
