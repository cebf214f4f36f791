#!/usr/bin/env bash
# Runs every test of the project and installs what the tests need (Go modules from the Go
# proxy, Python packages into a venv, pinned code generators, etcd and a kube-apiserver /
# kube-scheduler built from the Go proxy for the end-to-end tests). Caches live outside the
# repository in ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}.
#
#   scripts/test.sh                 everything
#   scripts/test.sh rust go         some stages: proto | rust | go | python | loadtest | e2e
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUSCHED_CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
mkdir -p "$GPUSCHED_CACHE"
export PATH="$PATH:/usr/local/go/bin"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(proto rust go python loadtest e2e)

log() { printf '\n=== %s ===\n' "$*"; }
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
      ;;
    rust)
      log "rust: cargo test --workspace"
      cargo test --workspace --all-targets
      cargo test --workspace --doc
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
      if [ -x loadtest/smoke.sh ]; then log "loadtest smoke run"; loadtest/smoke.sh; fi
      ;;
    e2e)
      if [ -x clients/agent/e2e-test.sh ]; then log "node agent on a real kube-apiserver"; clients/agent/e2e-test.sh; fi
      if [ -x deploy/e2e/test.sh ]; then log "scheduler extender and webhook on a real control plane"; deploy/e2e/test.sh; fi
      ;;
    *) echo "unknown stage $stage (proto | rust | go | python | loadtest | e2e)" >&2; exit 2 ;;
  esac
done
log "all tests passed"
