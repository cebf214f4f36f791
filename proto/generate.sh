#!/usr/bin/env bash
# Regenerates the code of every language from proto/ and lints the protos.
#
#   proto/generate.sh           regenerate Go and Python code in place, then buf lint
#   proto/generate.sh --check   fail when the checked-in generated code differs (CI), then buf lint
#
# Rust code is generated at build time by server/api/build.rs (protox + tonic-prost-build), so it
# cannot drift. Go: clients/go/generate.sh (protoc-gen-go, protoc-gen-go-grpc, buf, pinned, from
# the Go module proxy). Python: clients/python/generate.sh (grpcio-tools + mypy-protobuf, pinned,
# from PyPI). Tools are cached in ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=()
case "${1:-}" in
  "") ;;
  --check) mode=(--check) ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
clients/go/generate.sh "${mode[@]}"
clients/python/generate.sh "${mode[@]}"
CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
# No match is not an error here (pipefail would stop the script before the message below);
# versions are ranked with sort -V (buf-1.10.0 above buf-1.9.0).
BUF="$( (ls -d "$CACHE"/go/bin/buf-* 2>/dev/null || true) | sort -V | tail -n 1)"
[ -n "$BUF" ] && [ -x "$BUF" ] || { echo "proto/generate.sh: buf was not installed by clients/go/generate.sh (looked for $CACHE/go/bin/buf-*)" >&2; exit 1; }
echo "proto/generate.sh: buf lint (STANDARD + COMMENTS)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The repository's proto/buf.yaml declares STANDARD; COMMENTS is checked as well so every
# message, field, enum value and RPC stays documented.
cp -r proto/gpusched "$tmp/"
printf 'version: v2\nlint:\n  use: [STANDARD, COMMENTS]\n' > "$tmp/buf.yaml"
"$BUF" lint proto
"$BUF" lint "$tmp"
echo "proto/generate.sh: ok"
