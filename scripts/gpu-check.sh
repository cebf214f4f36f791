#!/usr/bin/env bash
# GPU check: on a machine with a real NVIDIA GPU (driver installed, libnvidia-ml.so.1 loadable),
# build gpusched-agent and gpusched-server and run the agent's READ-ONLY discovery: what NVML
# says about every card, MIG included (mode, profiles, placements, existing GPU instances), then
# the inventory as a private gpusched-server on 127.0.0.1 normalises it (its embedded default
# configuration: split count 10, no scaling). It never changes MIG mode, never creates or
# destroys an instance, never writes to the GPU: the agent only reads, and the nvidia-smi calls
# below are listings (-L, mig -lgip, -lgipp, -lgi).
#
#   scripts/gpu-check.sh > inventory.json
#
# stdout: `gpusched-agent inventory --format json`. stderr: the progress, nvidia-smi's listings
# (when present), the agent's facts (`inventory --format facts`: MIG layouts), the raw request,
# and the gres.conf and HAMi forms (MIG cards with their `migProfiles`), so the whole output can
# be pasted into a report. Exit 0 when the inventory was printed.
#
# Env (optional):
#   GPU_CHECK_PROFILE=release|debug   cargo profile (default debug: quicker to build)
#   AGENT_BIN=PATH SERVER_BIN=PATH    use these binaries instead of building
#   GPU_CHECK_NVML_LIBRARY=PATH       NVML library to load (default: libnvidia-ml.so.1, then .so)
#   GPU_CHECK_NODE_NAME=NAME          node name in the output (default: the host name)
#   GPU_CHECK_MIG_PROFILES=a,b        MIG allowlist, as mig.allowed_profiles (default: all)
#   CARGO_TARGET_DIR                  as for cargo
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
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
if command -v nvidia-smi >/dev/null; then
  # Listings only: profiles, their placements, existing GPU instances (fail without MIG mode).
  for listing in -lgip -lgipp -lgi; do
    log "nvidia-smi mig $listing:"
    nvidia-smi mig "$listing" >&2 2>&1 || log "nvidia-smi mig $listing: not available (MIG mode off, or no permission)"
  done
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
[[ -n "${GPU_CHECK_MIG_PROFILES:-}" ]] && export GPUSCHED_AGENT_MIG__ALLOWED_PROFILES="$GPU_CHECK_MIG_PROFILES"
[[ -n "${GPU_CHECK_NVML_LIBRARY:-}" ]] && args+=(--nvml-library "$GPU_CHECK_NVML_LIBRARY")
node="${GPU_CHECK_NODE_NAME:-${NODE_NAME:-}}"
[[ -n "$node" ]] && args+=(--node-name "$node")

# ---- the inventory ------------------------------------------------------------------------------
log "what the agent read, MIG layouts included (inventory --format facts):"
"$AGENT_BIN" "${args[@]}" inventory --format facts >"$WORK/facts.json" || log "facts read failed (see above)"
cat "$WORK/facts.json" >&2 2>/dev/null || true
if command -v python3 >/dev/null && [[ -s "$WORK/facts.json" ]]; then
  log "MIG summary:"
  python3 - "$WORK/facts.json" >&2 <<'PY' || true
import json, sys
facts = json.load(open(sys.argv[1]))
for d in facts.get("devices", []):
    mig = d.get("mig", {})
    head = f"card {d.get('index')} {d.get('uuid')} {d.get('modelName')}: MIG {mig.get('state')}"
    if mig.get("state") == "unknown":
        head += f" ({mig.get('reason')})"
    print(head)
    if mig.get("state") != "read":
        continue
    print(f"  {mig['computeSlices']} compute / {mig['memorySlices']} memory slices")
    for p in mig["profiles"]:
        starts = " ".join(str(s) for s in p["placements"])
        allowed = "" if p["allowed"] else "  (not allowed)"
        print(f"  {p['name']:<12} id {p['id']:>2}  {p['memMib']:>7} MiB  {p['computeSlices']}c/{p['memorySlices']}m"
              f"  cores {p['cores']:>3}  max {p['maxInstances']}  starts {starts}{allowed}")
    for i in mig["instances"]:
        print(f"  instance {i['id']}: {i['profile']} at {i['start']}..{i['start'] + i['size']}")
PY
fi
log "raw NVML facts (inventory --format raw):"
"$AGENT_BIN" "${args[@]}" inventory --format raw >&2 || log "raw read failed (see above)"
log "gres.conf form:"
"$AGENT_BIN" "${args[@]}" inventory --format slurm-gres >&2 || true
log "HAMi form:"
"$AGENT_BIN" "${args[@]}" inventory --format hami >&2 || true
log "inventory --format json (stdout):"
"$AGENT_BIN" "${args[@]}" inventory --format json
