#!/usr/bin/env bash
# GPU check: on a machine with a real NVIDIA GPU (driver installed, libnvidia-ml.so.1 loadable),
# build gpusched-agent and gpusched-server, start a private gpusched-server on 127.0.0.1 (its
# embedded default configuration: split count 10, no scaling) and print
# `gpusched-agent inventory --format json` on stdout. Exit 0 when the inventory was printed.
#
#   clients/agent/scripts/gpu-check.sh > inventory.json
#
# stderr gets the progress, nvidia-smi -L (when present), the raw NVML facts and the gres.conf
# and HAMi forms, so the whole output can be pasted into a report.
#
# Env (optional):
#   GPU_CHECK_PROFILE=release|debug   cargo profile (default debug: quicker to build)
#   AGENT_BIN=PATH SERVER_BIN=PATH    use these binaries instead of building
#   GPU_CHECK_NVML_LIBRARY=PATH       NVML library to load (default: libnvidia-ml.so.1, then .so)
#   GPU_CHECK_NODE_NAME=NAME          node name in the output (default: the host name)
#   CARGO_TARGET_DIR                  as for cargo
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
PROFILE="${GPU_CHECK_PROFILE:-debug}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpusched-gpu-check.XXXXXX")"
SERVER_PID=""

log() { echo "[gpu-check] $*" >&2; }
cleanup() {
  [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- binaries -----------------------------------------------------------------------------------
if [[ -z "${AGENT_BIN:-}" || -z "${SERVER_BIN:-}" ]]; then
  command -v cargo >/dev/null || { log "cargo not found (install Rust, or set AGENT_BIN and SERVER_BIN)"; exit 1; }
  flags=(-p gpusched-agent -p gpusched-service)
  [[ "$PROFILE" == release ]] && flags+=(--release)
  log "building gpusched-agent and gpusched-server ($PROFILE)"
  if ! (cd "$REPO" && cargo build -q "${flags[@]}"); then
    log "build failed; retrying offline (cached crates only)"
    (cd "$REPO" && cargo build -q --offline "${flags[@]}")
  fi
  dir="${CARGO_TARGET_DIR:-$REPO/target}/$PROFILE"
  AGENT_BIN="${AGENT_BIN:-$dir/gpusched-agent}"
  SERVER_BIN="${SERVER_BIN:-$dir/gpusched-server}"
fi
[[ -x "$AGENT_BIN" ]] || { log "no agent binary at $AGENT_BIN"; exit 1; }
[[ -x "$SERVER_BIN" ]] || { log "no server binary at $SERVER_BIN"; exit 1; }

# ---- what the machine says about itself ---------------------------------------------------------
if command -v nvidia-smi >/dev/null; then
  log "nvidia-smi -L:"
  nvidia-smi -L >&2 || log "nvidia-smi failed (driver not loaded?)"
else
  log "nvidia-smi not found"
fi
if command -v ldconfig >/dev/null; then
  ldconfig -p 2>/dev/null | grep -E 'libnvidia-ml\.so' >&2 || log "libnvidia-ml.so not in the ldconfig cache"
fi

# ---- a private gpusched-server ------------------------------------------------------------------
"$SERVER_BIN" --listen 127.0.0.1:0 --no-metrics >"$WORK/server.out" 2>"$WORK/server.log" &
SERVER_PID=$!
for _ in $(seq 150); do
  grep -q 'grpc=' "$WORK/server.out" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { log "gpusched-server exited:"; cat "$WORK/server.log" >&2; exit 1; }
  sleep 0.2
done
GRPC="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$WORK/server.out" | head -n1)"
[[ -n "$GRPC" ]] || { log "gpusched-server did not start:"; cat "$WORK/server.log" >&2; exit 1; }
log "gpusched-server at $GRPC"

args=(--service-address "$GRPC" --log-level warn)
[[ -n "${GPU_CHECK_NVML_LIBRARY:-}" ]] && args+=(--nvml-library "$GPU_CHECK_NVML_LIBRARY")
node="${GPU_CHECK_NODE_NAME:-${NODE_NAME:-}}"
[[ -n "$node" ]] && args+=(--node-name "$node")

# ---- the inventory ------------------------------------------------------------------------------
log "raw NVML facts (inventory --format raw):"
"$AGENT_BIN" "${args[@]}" inventory --format raw >&2 || log "raw read failed (see above)"
log "gres.conf form:"
"$AGENT_BIN" "${args[@]}" inventory --format slurm-gres >&2 || true
log "HAMi form:"
"$AGENT_BIN" "${args[@]}" inventory --format hami >&2 || true
log "inventory --format json (stdout):"
"$AGENT_BIN" "${args[@]}" inventory --format json
