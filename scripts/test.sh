#!/usr/bin/env bash
# Runs every test of the project and installs what the tests need (Go modules from the Go
# proxy, Python packages into a venv, pinned code generators, etcd and a kube-apiserver /
# kube-scheduler and helm built from the Go proxy, slurm-wlm, munge and chromium (the operator view's
# headless browser) from Debian, for the end-to-end tests). Caches live outside the
# repository in ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}.
#
#   scripts/test.sh                 everything
#   scripts/test.sh rust go         some stages: proto | rust | go | python | loadtest | fuzz | e2e
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUSCHED_CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
mkdir -p "$GPUSCHED_CACHE"
export PATH="$PATH:/usr/local/go/bin"
stages=("$@")
# `fuzz` is not in the default list: its instrumented build costs ~12 min cold (CI's budget);
# run it with `scripts/test.sh fuzz` (30 s per target) or scripts/fuzz.sh for hours.
[ ${#stages[@]} -gt 0 ] || stages=(proto rust go python loadtest e2e)

log() { printf '\n=== %s ===\n' "$*"; }
die() { echo "scripts/test.sh: $*" >&2; exit 1; }

# Runs a stage's script; one that is missing or not executable fails the run (it is never
# skipped silently).
run_script() {
  local script="$1" what="$2"
  [ -e "$script" ] || die "stage $stage: $script is missing"
  [ -x "$script" ] || die "stage $stage: $script is not executable (chmod +x $script)"
  log "$what"
  "$script"
}
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

server_bin() {
  # One build of the server for every non-Rust suite.
  if [ -z "${GPUSCHED_SERVER_BIN:-}" ]; then
    cargo build -p gpusched-service
    export GPUSCHED_SERVER_BIN="$target_dir/debug/gpusched-server"
  fi
  export GPUSCHED_SKIP_CARGO_BUILD=1
}

for stage in "${stages[@]}"; do
  case "$stage" in
    proto)
      log "proto: generated code up to date in every language, buf lint"
      proto/generate.sh --check
      log "versions: Cargo.toml's workspace version in every client and the chart"
      scripts/version.sh --check
      log "imports: no import cycle between modules (scripts/check-imports.py)"
      scripts/check-imports.py --self-test
      scripts/check-imports.py server/engine/src server/api/src server/runtime/src \
        clients/hami/src clients/agent/src clients/sim/src clients/slurm/src clients/rust/src \
        clients/kube/src server/service/src loadtest/src
      ;;
    rust)
      log "rust: cargo test --workspace"
      cargo test --workspace --all-targets
      cargo test --workspace --doc
      server_bin
      run_script server/service/tests/grpcurl.sh "grpcurl reads the server's error details (reflection)"
      ;;
    go)
      log "go client"
      server_bin
      GPUSCHED_SKIP_GEN_CHECK=1 clients/go/test.sh
      ;;
    python)
      log "python client"
      server_bin
      GPUSCHED_SKIP_GEN_CHECK=1 clients/python/test.sh
      ;;
    loadtest)
      run_script loadtest/smoke.sh "loadtest smoke run"
      ;;
    fuzz)
      FUZZ_SECONDS="${FUZZ_SECONDS:-30}" run_script scripts/fuzz.sh "fuzz targets, ${FUZZ_SECONDS:-30} s each (fuzz/)"
      ;;
    e2e)
      run_script clients/agent/e2e-test.sh "node agent on a real kube-apiserver"
      run_script deploy/e2e/test.sh "scheduler extender and webhook on a real control plane"
      run_script deploy/helm/test.sh "Helm chart: lint, schema, rendered manifests, install on a real control plane"
      run_script clients/slurm/e2e-test.sh "Slurm adapter on a real Slurm cluster (munged, slurmctld, two slurmd)"
      ;;
    *) echo "unknown stage $stage (proto | rust | go | python | loadtest | fuzz | e2e)" >&2; exit 2 ;;
  esac
done
log "all tests passed"
