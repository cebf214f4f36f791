#!/usr/bin/env bash
# Regenerates the Go code of the gpusched v1 API from proto/gpusched/v1/*.proto into
# clients/go/gpuschedv1/ (*.pb.go from protoc-gen-go, *_grpc.pb.go from protoc-gen-go-grpc).
#
# The compiler is buf (no protoc needed, local plugins only, works offline once installed). All
# three tools are pinned below and installed with `go install module@version` (Go module proxy
# only) into ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/go/bin, one binary per tool and version, so
# a pin change installs the new version beside the old one. Output is byte-identical on rerun.
# Runnable from any directory; several runs may overlap (installs are serialised with flock).
#
#   generate.sh          regenerate in place
#   generate.sh --check  regenerate into a temporary directory and fail if the checked-in code differs
#
# Environment: GPUSCHED_CACHE (cache dir), GO (go command, default: `go` on PATH, else
# /usr/local/go/bin/go).
set -euo pipefail
export LC_ALL=C

# --- pins ---------------------------------------------------------------------------------------
PROTOC_GEN_GO_VERSION=v1.36.12     # google.golang.org/protobuf/cmd/protoc-gen-go
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2  # google.golang.org/grpc/cmd/protoc-gen-go-grpc
BUF_VERSION=v1.75.0                # github.com/bufbuild/buf/cmd/buf
GO_MODULE=github.com/gpusched/gpusched/clients/go

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PROTO_DIR="$REPO/proto"
OUT_DIR="$HERE/gpuschedv1"
CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
BIN="$CACHE/go/bin"

CHECK=0
case "${1:-}" in
  "") ;;
  --check) CHECK=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO=go; else GO=/usr/local/go/bin/go; fi
fi

mkdir -p "$BIN"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# --- the pinned tools ---------------------------------------------------------------------------
# install NAME PACKAGE VERSION: $BIN/NAME-VERSION, built by `go install PACKAGE@VERSION`.
install_tool() {
  local name="$1" pkg="$2" version="$3" dest="$BIN/$1-$3"
  [[ -x "$dest" ]] && return 0
  echo "generate.sh: installing $pkg@$version into $BIN" >&2
  local gobin="$TMP/gobin-$name"
  mkdir -p "$gobin"
  # Outside any module, so the repository's go.mod and GOFLAGS=-mod=... play no part.
  (cd "$TMP" && GOBIN="$gobin" GOFLAGS=-buildvcs=false GO111MODULE=on "$GO" install "$pkg@$version")
  mv -f "$gobin/$(basename "$pkg")" "$dest"
}
(
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$BIN/.install.lock"
    flock 9
  fi
  install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
  install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
  install_tool buf github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
)

# --- generate into a temporary tree -------------------------------------------------------------
if ! compgen -G "$PROTO_DIR/gpusched/v1/*.proto" >/dev/null; then
  echo "generate.sh: no .proto files under $PROTO_DIR/gpusched/v1" >&2
  exit 1
fi
GEN="$TMP/gen"
mkdir -p "$GEN"
TEMPLATE="$(cat <<EOF
{
  "version": "v2",
  "plugins": [
    {"local": "$BIN/protoc-gen-go-$PROTOC_GEN_GO_VERSION", "out": "$GEN", "opt": ["module=$GO_MODULE"]},
    {"local": "$BIN/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION", "out": "$GEN", "opt": ["module=$GO_MODULE"]}
  ]
}
EOF
)"
# buf keeps its cache (nothing is downloaded: no deps, local plugins) under our cache dir, and
# must not read a buf.yaml/buf.gen.yaml from elsewhere: the input is the proto/ directory itself.
(
  cd "$TMP"
  BUF_CACHE_DIR="$CACHE/buf" "$BIN/buf-$BUF_VERSION" generate "$PROTO_DIR" --template "$TEMPLATE" \
    --path "$PROTO_DIR/gpusched"
) > "$TMP/buf.log" 2>&1 || { cat "$TMP/buf.log" >&2; exit 1; }

NEW="$GEN/gpuschedv1"
if ! compgen -G "$NEW/*.pb.go" >/dev/null; then
  echo "generate.sh: buf produced no Go files (see below)" >&2
  cat "$TMP/buf.log" >&2
  exit 1
fi

# --- install or compare -------------------------------------------------------------------------
# Only generated files (*.pb.go) live in gpuschedv1/; stale ones are removed.
if [[ $CHECK -eq 1 ]]; then
  mkdir -p "$TMP/old"
  if compgen -G "$OUT_DIR/*.pb.go" >/dev/null; then cp "$OUT_DIR"/*.pb.go "$TMP/old/"; fi
  if diff -r "$TMP/old" "$NEW"; then
    echo "generate.sh: generated Go code is up to date" >&2
  else
    echo "generate.sh: generated Go code is stale; run clients/go/generate.sh" >&2
    exit 1
  fi
else
  mkdir -p "$OUT_DIR"
  rm -f "$OUT_DIR"/*.pb.go
  cp "$NEW"/*.pb.go "$OUT_DIR/"
  echo "generate.sh: wrote $(cd "$NEW" && ls *.pb.go | tr '\n' ' ')into $OUT_DIR" >&2
fi
