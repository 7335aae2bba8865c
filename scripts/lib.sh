# Helpers shared by the check scripts; source it from the repository root.

# Builds the debug `tidewater` binary and prints its absolute path.
#
# With the same selection as the suite's `cargo test --workspace
# --all-features` (every member, every feature, dev-dependencies in play
# because examples are built), so that after the suite nothing is built
# again: `cargo build -p tidewater-cli` alone resolves other features and
# compiles most dependencies a second time (about 7 minutes of a cold CI run).
tidewater_binary() {
  cargo build --quiet --workspace --all-features --bins --examples
  echo "$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/tidewater"
}

# A scratch folder in $work, and a trap that stops the process in $pid (once
# the caller starts one) and removes the folder when the script exits.
scratch_with_cleanup() {
  work="$(mktemp -d)"
  trap 'if [[ -n ${pid:-} ]]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi; rm -rf "$work"' EXIT
}
