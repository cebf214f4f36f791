#!/usr/bin/env bash
# Runs every test of the project: Rust workspace, then (when present) the Go and Python clients
# and the end-to-end tests on a real Kubernetes control plane. It installs what they need.
#
#   scripts/test.sh            # everything
#   scripts/test.sh rust       # one stage: rust | go | python | e2e
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUSCHED_CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
mkdir -p "$GPUSCHED_CACHE"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(rust go python e2e)

log() { printf '\n=== %s ===\n' "$*"; }

for stage in "${stages[@]}"; do
  case "$stage" in
    rust)
      log "rust: cargo test --workspace"
      cargo test --workspace --all-targets
      cargo test --workspace --doc
      ;;
    go)
      if [ -x clients/go/test.sh ]; then log "go client"; clients/go/test.sh; fi
      ;;
    python)
      if [ -x clients/python/test.sh ]; then log "python client"; clients/python/test.sh; fi
      ;;
    e2e)
      if [ -x deploy/e2e/test.sh ]; then log "e2e on a real control plane"; deploy/e2e/test.sh; fi
      ;;
    *) echo "unknown stage $stage (rust | go | python | e2e)" >&2; exit 2 ;;
  esac
done
log "all tests passed"
