#!/usr/bin/env bash
# Tests of the Go client: generated code up to date, gofmt, go vet, then go test against a live
# gpusched-server (the vectors of proto/testdata, the wrapper, TLS, the README examples).
# Runnable from any directory; extra arguments go to `go test` (e.g. -run TestVectors -v).
#
# Modules come from the Go module proxy ($GOPROXY) into the module cache, checked against the
# committed go.sum (-mod=readonly: a missing or changed requirement fails instead of editing
# go.mod).
#
# Environment:
#   GPUSCHED_CACHE               cache dir (default ~/.cache/gpusched): generator tools in go/bin
#   GPUSCHED_SERVER_BIN          server binary to test against (then nothing is built)
#   CARGO_TARGET_DIR             honoured when building and locating the server
#   GPUSCHED_SKIP_CARGO_BUILD=1  do not run cargo (use the binary already in the target dir)
#   GPUSCHED_ALLOW_SKIP=1        skip (instead of fail) the live-server tests when there is no binary
#   GPUSCHED_SKIP_GEN_CHECK=1    do not verify that the checked-in generated code is up to date
#   GO                           go command (default: `go` on PATH, else /usr/local/go/bin/go)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export GPUSCHED_CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
mkdir -p "$GPUSCHED_CACHE"

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi
export GO
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

step() { printf '\n== %s\n' "$*" >&2; }

# --- generated code up to date ------------------------------------------------------------------
if [[ "${GPUSCHED_SKIP_GEN_CHECK:-0}" != 1 ]]; then
  step "generate.sh --check"
  "$HERE/generate.sh" --check
fi

# --- the server binary --------------------------------------------------------------------------
# shellcheck source=../../scripts/server-bin.sh
source "$REPO/scripts/server-bin.sh"

cd "$HERE"

# --- format and vet -----------------------------------------------------------------------------
step "gofmt -l (hand-written code)"
unformatted="$("$("$GO" env GOROOT)/bin/gofmt" -l gpusched)"
if [[ -n "$unformatted" ]]; then
  echo "test.sh: not gofmt-formatted:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step "go vet ./..."
"$GO" vet ./...

# --- tests --------------------------------------------------------------------------------------
step "go test ./..."
"$GO" test -count=1 "$@" ./...
