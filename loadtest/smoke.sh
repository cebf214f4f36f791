#!/usr/bin/env bash
# Smoke run of gpusched-loadtest (scripts/test.sh stage `loadtest`): builds the server and the
# tool (debug), then runs tests/smoke.rs: a few seconds of closed- and open-loop load and a
# two-size sweep against a spawned server with a small cluster; every report must be
# well-formed with zero errors. Honours CARGO_TARGET_DIR. Speed is not asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
cargo build -q -p gpusched-service -p gpusched-loadtest
GPUSCHED_SERVER_BIN="$target_dir/debug/gpusched-server" \
  cargo test -q -p gpusched-loadtest --test smoke -- --nocapture
