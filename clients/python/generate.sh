#!/usr/bin/env bash
# Regenerates the Python code of the gpusched v1 API from proto/gpusched/v1/*.proto:
#   src/gpusched/_gen/gpusched/v1/*_pb2.py, *_pb2_grpc.py  (grpcio-tools: bundled protoc + gRPC plugin)
#   src/gpusched/_gen/gpusched/v1/*.pyi                     (mypy-protobuf stubs)
#   src/gpusched/v1.py                                      (public re-exports)
# The toolchain is pinned in requirements-gen.txt and lives in a venv outside the repository:
#   ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/py-gen-venv  (rebuilt when the pins or Python change).
# Output is byte-identical on rerun. Runnable from any directory.
#   generate.sh          regenerate in place
#   generate.sh --check  regenerate into a temporary directory and fail if the checked-in code differs
# Environment: GPUSCHED_CACHE (cache dir), PYTHON (interpreter for the venv, default python3).
set -euo pipefail
export LC_ALL=C

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PROTO_DIR="$REPO/proto"
PKG_DIR="$HERE/src/gpusched"
REQ="$HERE/requirements-gen.txt"
CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
VENV="$CACHE/py-gen-venv"
PYTHON="${PYTHON:-python3}"

CHECK=0
case "${1:-}" in
  "") ;;
  --check) CHECK=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mkdir -p "$CACHE"

# --- the pinned generator venv (serialised: several generate.sh may run at once) ---------------
ensure_venv() {
  local want have=""
  want="$(sha256sum "$REQ" | cut -d' ' -f1) $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
  [[ -f "$VENV/.gpusched-stamp" ]] && have="$(cat "$VENV/.gpusched-stamp")"
  if [[ "$want" != "$have" || ! -x "$VENV/bin/python" ]]; then
    echo "generate.sh: creating $VENV" >&2
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv -r "$REQ"
    "$VENV/bin/python" -m pip check >&2
    echo "$want" > "$VENV/.gpusched-stamp"
  fi
}
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/py-gen-venv.lock"
  flock 9
fi
ensure_venv

# --- generate into a temporary tree -------------------------------------------------------------
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
RAW="$TMP/raw"
mkdir -p "$RAW"

mapfile -t PROTOS < <(cd "$PROTO_DIR" && find gpusched -name '*.proto' | sort)
if [[ ${#PROTOS[@]} -eq 0 ]]; then
  echo "generate.sh: no .proto files under $PROTO_DIR/gpusched" >&2
  exit 1
fi
WKT="$("$VENV/bin/python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"

(
  cd "$PROTO_DIR"
  "$VENV/bin/python" -m grpc_tools.protoc \
    -I . -I "$WKT" \
    --python_out="$RAW" \
    --grpc_python_out="$RAW" \
    --plugin=protoc-gen-mypy="$VENV/bin/protoc-gen-mypy" --mypy_out="$RAW" \
    --plugin=protoc-gen-mypy_grpc="$VENV/bin/protoc-gen-mypy_grpc" --mypy_grpc_out="$RAW" \
    --include_imports --descriptor_set_out="$TMP/descriptors.pb" \
    "${PROTOS[@]}"
) > "$TMP/protoc.log" 2>&1 || { cat "$TMP/protoc.log" >&2; exit 1; }

NEW="$TMP/new"
"$VENV/bin/python" "$HERE/scripts/postprocess_gen.py" "$RAW" "$TMP/descriptors.pb" "$NEW"

# --- install or compare -------------------------------------------------------------------------
if [[ $CHECK -eq 1 ]]; then
  if diff -r "$NEW/_gen" "$PKG_DIR/_gen" -x __pycache__ && diff "$NEW/v1.py" "$PKG_DIR/v1.py"; then
    echo "generate.sh: generated code is up to date" >&2
  else
    echo "generate.sh: generated code is stale; run clients/python/generate.sh" >&2
    exit 1
  fi
else
  rm -rf "$PKG_DIR/_gen"
  cp -R "$NEW/_gen" "$PKG_DIR/_gen"
  cp "$NEW/v1.py" "$PKG_DIR/v1.py"
  echo "generate.sh: wrote $PKG_DIR/_gen and $PKG_DIR/v1.py (${#PROTOS[@]} proto files)" >&2
fi
