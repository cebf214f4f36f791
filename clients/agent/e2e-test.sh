#!/usr/bin/env bash
# End-to-end test of gpusched-agent against a real kube-apiserver (deploy/e2e), the fake NVML
# library (8 cards, built here with cc) and a real gpusched-server:
#
#  1. deploy/agent/daemonset.yaml applies (namespace, RBAC, ValidatingAdmissionPolicy, DaemonSet);
#  2. the agent runs with the DaemonSet's ServiceAccount (a token bound to a pod on its node), so
#     the manifest's RBAC is what is tested; it may patch its own Node, not another one;
#  3. the Node gets HAMi's annotations in their exact format, and nvidia.com/gpu capacity
#     (--patch-capacity); a card that goes unhealthy in the fake is published unhealthy;
#     HAMi's handshake request (Requesting_...) and a foreign register value are answered at once;
#  4. SIGTERM with --remove-on-shutdown removes the annotations and the capacity; without it
#     they stay; a card switched to MIG mode in the fake (with a GPU instance) is published in
#     HAMi's MIG node form (count 7, its migProfiles) and with its whole layout in
#     gpusched.io/node-mig-layouts (removed again when no card is in MIG mode);
#  5. the Rust test tests/kube_e2e.rs (ignored in plain `cargo test`) runs against the cluster.
#
#   clients/agent/e2e-test.sh            # exit 0 = PASS
#
# Env: AGENT_E2E_CLUSTER=DIR reuse/keep a cluster workdir (default: a fresh one, torn down);
#      KEEP=1 keep the work directory; CARGO_TARGET_DIR as for cargo; CC (default cc).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpusched-agent-e2e.XXXXXX")"
CLUSTER="${AGENT_E2E_CLUSTER:-$WORK/cluster}"
NODE=gpu-agent-e2e
OTHER=gpu-agent-other
NS=gpusched-system
PIDS=()

log() { echo "[agent-e2e] $*" >&2; }

cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z "${AGENT_E2E_CLUSTER:-}" && -f "$CLUSTER/env.sh" ]]; then
    "$REPO/deploy/e2e/cluster-down.sh" "$CLUSTER" --purge >/dev/null 2>&1 || true
  fi
  if [[ "${KEEP:-0}" == 1 || $rc -ne 0 ]]; then
    log "work directory kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/agent*.log "$WORK/server.log"; do
    [[ -f "$f" ]] && { echo "---- $f (last 40 lines)" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls every 0.2 s.
wait_until() {
  local secs="$1" what="$2"; shift 2
  local end=$((SECONDS + secs))
  until "$@"; do
    ((SECONDS < end)) || fail "timed out after ${secs}s waiting for: $what"
    sleep 0.2
  done
}

# ---- build --------------------------------------------------------------------------------------
log "building gpusched-agent and gpusched-server"
(cd "$REPO" && nice cargo build -q -p gpusched-agent -p gpusched-service)
BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug"
[[ -x "$BIN/gpusched-agent" && -x "$BIN/gpusched-server" ]] || fail "binaries not found in $BIN"

mkdir -p "$WORK/nvml"
"${CC:-cc}" -Wall -Wextra -Werror -shared -fPIC -o "$WORK/nvml/libnvidia-ml.so.1" \
  "$HERE/tests/fake-nvml/fake_nvml.c" -lpthread -ldl
STATE="$WORK/nvml/fake-nvml.state"
: >"$STATE"
set_state() { printf '%s\n' "$@" >"$STATE.tmp" && mv "$STATE.tmp" "$STATE"; }

# A sysfs tree: cards 0-3 on NUMA node 0, 4-7 on node 1 (PCI bus (i+1)*16).
SYS="$WORK/sys"
for i in 0 1 2 3 4 5 6 7; do
  d="$SYS/bus/pci/devices/0000:$(printf '%02x' $(((i + 1) * 16))):00.0"
  mkdir -p "$d"
  echo $((i / 4)) >"$d/numa_node"
done
mkdir -p "$SYS/devices/system/node/node0" "$SYS/devices/system/node/node1"
echo 0-31 >"$SYS/devices/system/node/node0/cpulist"
echo 32-63 >"$SYS/devices/system/node/node1/cpulist"

# ---- cluster, manifests, nodes ------------------------------------------------------------------
log "control plane in $CLUSTER"
"$REPO/deploy/e2e/cluster-up.sh" "$CLUSTER" >/dev/null
# shellcheck disable=SC1091
. "$CLUSTER/env.sh"
ADMIN_KUBECONFIG="$KUBECONFIG"

kubectl apply -f "$REPO/deploy/agent/daemonset.yaml" >/dev/null || fail "deploy/agent/daemonset.yaml does not apply"
"$REPO/deploy/e2e/make-node.sh" "$NODE" 8 >/dev/null
"$REPO/deploy/e2e/make-node.sh" "$OTHER" 4 >/dev/null

# The agent's credentials: its ServiceAccount, in a token bound to a pod on $NODE (what the
# kubelet gives the DaemonSet's pod). The pod never runs: there is no kubelet.
kubectl -n "$NS" delete pod agent-e2e --grace-period=0 --force >/dev/null 2>&1 || true
kubectl -n "$NS" apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: agent-e2e
spec:
  serviceAccountName: gpusched-agent
  nodeName: $NODE
  containers:
  - name: agent
    image: ghcr.io/gpusched/gpusched-agent:0.1.0
POD
TOKEN="$(kubectl -n "$NS" create token gpusched-agent --bound-object-kind Pod \
  --bound-object-name agent-e2e --duration 1h)" || fail "cannot create a token for gpusched-agent"
AGENT_KUBECONFIG="$WORK/agent.kubeconfig"
cat >"$AGENT_KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "$APISERVER_URL", certificate-authority: "$KUBE_CA_FILE"}
users:
- name: gpusched-agent
  user: {token: "$TOKEN"}
contexts:
- name: agent
  context: {cluster: e2e, user: gpusched-agent}
current-context: agent
KC
chmod 600 "$AGENT_KUBECONFIG"

# The ServiceAccount may change its own Node only (RBAC + ValidatingAdmissionPolicy).
as_agent() { KUBECONFIG="$AGENT_KUBECONFIG" kubectl "$@"; }
policy_ready() { as_agent annotate node "$NODE" gpusched.e2e/probe=1 --overwrite >/dev/null 2>&1; }
wait_until 30 "the agent's ServiceAccount may annotate its own node" policy_ready
other_denied() { ! as_agent annotate node "$OTHER" gpusched.e2e/probe=1 --overwrite >"$WORK/denied.txt" 2>&1; }
wait_until 30 "the ValidatingAdmissionPolicy denies another node" other_denied
grep -q "may only change the Node its pod runs on" "$WORK/denied.txt" || fail "unexpected denial: $(cat "$WORK/denied.txt")"
as_agent delete node "$OTHER" --dry-run=server >/dev/null 2>&1 && fail "the agent may delete nodes"
log "RBAC and admission policy: own node only"

# ---- gpusched-server ----------------------------------------------------------------------------
"$BIN/gpusched-server" --listen 127.0.0.1:0 --no-metrics >"$WORK/server.out" 2>"$WORK/server.log" &
PIDS+=($!)
server_up() { grep -q 'grpc=' "$WORK/server.out"; }
wait_until 30 "gpusched-server to listen" server_up
GRPC="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$WORK/server.out" | head -n1)"
log "gpusched-server at $GRPC"

# ---- expected annotations -----------------------------------------------------------------------
uuid() { echo "GPU-5a1e0000-0000-4000-8000-00000000000$1"; }
expected_register() { # unhealthy indices...
  local out="" sep="" i
  for i in 0 1 2 3 4 5 6 7; do
    local card="{\"id\":\"$(uuid "$i")\","
    ((i > 0)) && card+="\"index\":$i,"
    card+="\"count\":10,\"devmem\":81920,\"devcore\":100,\"type\":\"NVIDIA H100 80GB HBM3\","
    ((i / 4 > 0)) && card+="\"numa\":$((i / 4)),"
    card+="\"mode\":\"hami-core\","
    [[ " $* " == *" $i "* ]] || card+="\"health\":true,"
    card+="\"devicevendor\":\"NVIDIA\"}"
    out+="$sep$card"
    sep=","
  done
  echo "[$out]"
}
expected_score() {
  local out="" sep="" a b
  for a in 0 1 2 3 4 5 6 7; do
    local inner="" isep="" s
    for b in 0 1 2 3 4 5 6 7; do
      ((a == b)) && continue
      if ((a / 2 == b / 2)); then s=450; elif ((a / 4 == b / 4)); then s=30; else s=10; fi
      inner+="$isep\"$(uuid "$b")\":$s"
      isep=","
    done
    out+="$sep{\"uuid\":\"$(uuid "$a")\",\"score\":{$inner}}"
    sep=","
  done
  echo "[$out]"
}
anno() { kubectl get node "$NODE" -o jsonpath="{.metadata.annotations.${1//./\\.}}"; }
capacity() { kubectl get node "$NODE" -o jsonpath="{.status.$1.nvidia\\.com/gpu}"; }

# ---- run the agent ------------------------------------------------------------------------------
start_agent() { # log-name extra-args...
  local name="$1"; shift
  FAKE_NVML_STATE="$STATE" KUBECONFIG="$AGENT_KUBECONFIG" NODE_NAME="$NODE" \
    GPUSCHED_AGENT_TELEMETRY__LOG_LEVEL=info \
    "$BIN/gpusched-agent" run --service-address "$GRPC" \
    --nvml-library "$WORK/nvml/libnvidia-ml.so.1" --sysfs-root "$SYS" \
    --interval 60s --poll-interval 300ms --health-listen 127.0.0.1:0 "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.log" &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
  agent_started() { grep -q 'health=' "$WORK/$name.out"; }
  wait_until 30 "$name to start" agent_started
  HEALTH="$(sed -n 's/.*health=\([^ ]*\).*/\1/p' "$WORK/$name.out" | head -n1)"
}
stop_agent() {
  kill -TERM "$AGENT_PID"
  local rc=0
  wait "$AGENT_PID" || rc=$?
  [[ $rc -eq 0 ]] || fail "agent exited with $rc on SIGTERM"
}

log "agent run 1: --remove-on-shutdown --patch-capacity"
set_state ""
start_agent agent1 --remove-on-shutdown --patch-capacity
has_register() { [[ -n "$(anno hami.io/node-nvidia-register)" ]]; }
wait_until 30 "the register annotation" has_register
[[ "$(anno hami.io/node-nvidia-register)" == "$(expected_register)" ]] ||
  fail "register annotation: got $(anno hami.io/node-nvidia-register), want $(expected_register)"
[[ "$(anno hami.io/node-nvidia-score)" == "$(expected_score)" ]] ||
  fail "score annotation: got $(anno hami.io/node-nvidia-score)"
[[ "$(anno hami.io/node-handshake)" =~ ^Reported_[0-9]{4}-[0-9]{2}-[0-9]{2}\ [0-9]{2}:[0-9]{2}:[0-9]{2}$ ]] ||
  fail "handshake annotation: $(anno hami.io/node-handshake)"
cap80() { [[ "$(capacity capacity)" == 80 && "$(capacity allocatable)" == 80 ]]; }
wait_until 10 "capacity and allocatable nvidia.com/gpu = 80" cap80
[[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$HEALTH/readyz")" == 200 ]] || fail "/readyz is not 200"
log "annotations in HAMi's format, capacity 80, ready"

log "card 3 gets a critical XID in the fake"
set_state "xid 3 79"
card3_unhealthy() { [[ "$(anno hami.io/node-nvidia-register)" == "$(expected_register 3)" ]]; }
wait_until 10 "card 3 published unhealthy" card3_unhealthy
cap70() { [[ "$(capacity capacity)" == 70 && "$(capacity allocatable)" == 70 ]]; }
wait_until 10 "capacity 70 after card 3 failed" cap70

log "card 6 falls off the bus"
set_state "xid 3 79" "lost 6"
card6_unhealthy() { [[ "$(anno hami.io/node-nvidia-register)" == "$(expected_register 3 6)" ]]; }
wait_until 10 "cards 3 and 6 published unhealthy" card6_unhealthy

log "HAMi's scheduler asks (Requesting_...): answered without waiting for the 60 s interval"
kubectl annotate node "$NODE" --overwrite "hami.io/node-handshake=Requesting_$(date '+%Y-%m-%d %H:%M:%S')" >/dev/null
reported() { [[ "$(anno hami.io/node-handshake)" == Reported_* ]]; }
wait_until 10 "the handshake answered" reported
log "a foreign register value is replaced"
kubectl annotate node "$NODE" --overwrite 'hami.io/node-nvidia-register=[]' >/dev/null
wait_until 10 "the register restored" card6_unhealthy

log "SIGTERM with --remove-on-shutdown"
stop_agent
[[ -z "$(anno hami.io/node-nvidia-register)$(anno hami.io/node-nvidia-score)$(anno hami.io/node-handshake)$(anno gpusched.io/node-mig-layouts)" ]] ||
  fail "annotations left after a clean shutdown with --remove-on-shutdown"
[[ -z "$(capacity capacity)$(capacity allocatable)" ]] || fail "capacity left after a clean shutdown"

log "agent run 2: without --remove-on-shutdown, annotations stay"
set_state ""
start_agent agent2
all_healthy() { [[ "$(anno hami.io/node-nvidia-register)" == "$(expected_register)" ]]; }
wait_until 30 "the register annotation (run 2)" all_healthy
log "card 5 in MIG mode with a 3g.40gb instance: HAMi's MIG node form (count 7, migProfiles)"
set_state "mig 5" "gi 5 2 4"
mig5() {
  local want="{\"id\":\"$(uuid 5)\",\"index\":5,\"count\":7,\"devmem\":81920,\"devcore\":100,"
  want+="\"type\":\"NVIDIA H100 80GB HBM3\",\"numa\":1,\"mode\":\"mig\",\"migProfiles\":["
  want+="{\"name\":\"1g.10gb\",\"memoryMB\":9984,\"core\":13,\"sliceCount\":1,\"placements\":"
  [[ "$(anno hami.io/node-nvidia-register)" == *"$want"* ]]
}
wait_until 10 "card 5 published with its MIG profiles" mig5
layouts="$(anno gpusched.io/node-mig-layouts)"
[[ "$layouts" == "{\"$(uuid 5)\":{\"computeSlices\":7,\"memorySlices\":8,\"profiles\":["* &&
  "$layouts" == *'"instances":[{"profile":"3g.40gb","start":4,"size":4}]}}' ]] ||
  fail "gpusched.io/node-mig-layouts of card 5: $layouts"
set_state ""
wait_until 10 "card 5 back in mode hami-core" all_healthy
no_layouts() { [[ -z "$(anno gpusched.io/node-mig-layouts)" ]]; }
wait_until 10 "gpusched.io/node-mig-layouts removed without MIG cards" no_layouts
stop_agent
[[ "$(anno hami.io/node-nvidia-register)" == "$(expected_register)" ]] || fail "annotations removed without --remove-on-shutdown"
[[ -z "$(capacity capacity)" ]] || fail "capacity patched without --patch-capacity"

log "Rust test against the apiserver (tests/kube_e2e.rs)"
(cd "$REPO" && KUBECONFIG="$ADMIN_KUBECONFIG" GPUSCHED_AGENT_E2E=1 \
  nice cargo test -q -p gpusched-agent --test kube_e2e -- --ignored --test-threads=1) ||
  fail "tests/kube_e2e.rs"

echo "PASS: gpusched-agent e2e (HAMi annotations, MIG profiles, health updates, handshake, capacity, RBAC, shutdown)"
