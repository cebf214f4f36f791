#!/usr/bin/env bash
# End-to-end test of gpusched on a real control plane (etcd + kube-apiserver + kube-scheduler on
# 127.0.0.1, no kubelet): the kube-scheduler runs deploy/manifests/kube-scheduler-config.yaml with
# the extender pointed at the local gpusched-kube, the RBAC, webhook configurations and admission
# policies of deploy/ are applied to the apiserver (and every manifest is validated server-side),
# gpusched-kube runs with a ServiceAccount token bound only by that RBAC, then
# clients/kube/tests/e2e/ runs
# the scenarios (admission, forged decisions, fail closed, seed stories, weights, mutex, bad nodes, traces,
# preemption, MIG nodes registered by gpusched-agent on the fake NVML library, bursts, GPU
# quotas per namespace, restart, two replicas, the operator view in a headless Chromium and
# kubectl-gpusched).
# Jaeger (built by build-jaeger.sh, cached) receives both binaries' traces over OTLP.
#
#   deploy/e2e/test.sh                 # called by scripts/test.sh (stage e2e)
#
# Env: E2E_TEST_WORKDIR (default ${TMPDIR:-/tmp}/gpusched-e2e-test; the cluster there is recreated
#      empty), CARGO_TARGET_DIR, E2E_KEEP=1 (leave the cluster and processes running),
#      E2E_UPDATE_README=1 (write the measured numbers into deploy/e2e/README.md),
#      E2E_RELEASE=1 (optimised gpusched-server and gpusched-kube, for the throughput numbers),
#      GPUSCHED_SERVER_BIN, GPUSCHED_KUBE_BIN (prebuilt gpusched-server/gpusched-kube instead of
#      the ones built here),
#      E2E_SHIM_LOG (gpusched-kube log filter, default info),
#      E2E_FILTER (comma list: run only the scenarios whose name contains one of them),
#      E2E_TRACES=0 (no Jaeger, traces off, the traces scenario skipped),
#      E2E_UPDATE_SCREENSHOT=1 (copy the operator view's screenshot to docs/images/operator-view.png),
#      E2E_CHROMIUM (a Chromium binary; default: `chromium`, installed with apt-get when missing).
#      E2E_SCHEDULER_QPS (client QPS of both kube-schedulers, burst twice that; default 50/100).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
WORK="${E2E_TEST_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e-test}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
CLUSTER="$WORK/cluster"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
export PATH="$PATH:/usr/local/go/bin"

log() { echo "[e2e] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

SERVER_PID=""
JAEGER_PID=""
cleanup() {
  local rc=$?
  if [[ "${E2E_KEEP:-0}" == 1 ]]; then
    log "E2E_KEEP=1: leaving the cluster ($CLUSTER), gpusched-server (pid $SERVER_PID) and Jaeger (pid ${JAEGER_PID:-none}, query ${E2E_JAEGER_QUERY:-off}) running"
    exit $rc
  fi
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -TERM "$SERVER_PID" 2>/dev/null || true; fi
  if [[ -n "$JAEGER_PID" ]] && kill -0 "$JAEGER_PID" 2>/dev/null; then kill -TERM "$JAEGER_PID" 2>/dev/null || true; fi
  "$HERE/cluster-down.sh" "$CLUSTER" >/dev/null 2>&1 || true
  if (( rc != 0 )); then
    log "logs: $WORK/*.log, $CLUSTER/logs/"
    f="$CLUSTER/logs/kube-scheduler.log"
    if [[ -f "$f" ]]; then log "--- tail $f"; tail -n 30 "$f" >&2; fi
  fi
  exit $rc
}
trap cleanup EXIT

# ---- build ---------------------------------------------------------------------------------------
PROFILE=debug
PROFILE_FLAG=()
if [[ "${E2E_RELEASE:-0}" == 1 ]]; then PROFILE=release; PROFILE_FLAG=(--release); fi
log "building gpusched-server, gpusched-kube ($PROFILE) and the e2e test"
if [[ -z "${GPUSCHED_SERVER_BIN:-}" || -z "${GPUSCHED_KUBE_BIN:-}" ]]; then
  nice cargo build -q "${PROFILE_FLAG[@]}" -p gpusched-service -p gpusched-kube
fi
# The MIG scenario registers its nodes with gpusched-agent on the fake NVML library (debug build:
# the agent's speed is not measured); skipped when E2E_FILTER leaves the scenario out.
AGENT_BIN=""
FAKE_NVML=""
wants_mig() { # as the test's filter: a scenario runs when its name contains one of the items
  [[ -z "${E2E_FILTER:-}" ]] && return 0
  local f
  IFS=, read -ra items <<<"$E2E_FILTER"
  for f in "${items[@]}"; do f="${f// /}"; [[ -n "$f" && mig == *"$f"* ]] && return 0; done
  return 1
}
if wants_mig; then
  log "building gpusched-agent and the fake NVML library (MIG scenario)"
  nice cargo build -q -p gpusched-agent
  AGENT_BIN="$TARGET_DIR/debug/gpusched-agent"
  mkdir -p "$WORK/nvml"
  "${CC:-cc}" -Wall -Wextra -Werror -shared -fPIC -o "$WORK/nvml/libnvidia-ml.so.1" \
    "$REPO/clients/agent/tests/fake-nvml/fake_nvml.c" -lpthread -ldl
  FAKE_NVML="$WORK/nvml/libnvidia-ml.so.1"
fi
nice cargo test -q -p gpusched-kube --test e2e --no-run 2>/dev/null
SERVER_BIN="${GPUSCHED_SERVER_BIN:-$TARGET_DIR/$PROFILE/gpusched-server}"
KUBE_SHIM_BIN="${GPUSCHED_KUBE_BIN:-$TARGET_DIR/$PROFILE/gpusched-kube}"
[[ -x "$SERVER_BIN" && -x "$KUBE_SHIM_BIN" ]] || die "binaries missing in $TARGET_DIR/$PROFILE"

# ---- the operator view's scenario: kubectl-gpusched and a headless Chromium -----------------------
# wants NAME: whether E2E_FILTER selects the scenario NAME (as the test does: a substring).
wants() {
  [[ -z "${E2E_FILTER:-}" ]] && return 0
  local f
  IFS=',' read -ra filters <<<"$E2E_FILTER"
  for f in "${filters[@]}"; do
    f="${f// /}"
    [[ -n "$f" && "$1" == *"$f"* ]] && return 0
  done
  return 1
}
if wants opview; then
  CTL_BIN="${GPUSCHED_CTL_BIN:-$(dirname "$KUBE_SHIM_BIN")/kubectl-gpusched}"
  if [[ ! -x "$CTL_BIN" ]]; then
    nice cargo build -q "${PROFILE_FLAG[@]}" -p gpusched-kube --bin kubectl-gpusched
    CTL_BIN="$TARGET_DIR/$PROFILE/kubectl-gpusched"
  fi
  [[ -x "$CTL_BIN" ]] || die "kubectl-gpusched missing ($CTL_BIN)"
  CHROMIUM="${E2E_CHROMIUM:-$(command -v chromium || true)}"
  if [[ -z "$CHROMIUM" ]]; then
    log "installing Debian's chromium (headless browser of the operator view's scenario)"
    if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
    { DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq chromium >/dev/null 2>&1 ||
      { timeout 300 $SUDO apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq chromium >/dev/null 2>&1; }; } ||
      die "could not install chromium with apt-get"
    CHROMIUM="$(command -v chromium)"
  fi
  export E2E_CTL_BIN="$CTL_BIN" E2E_CHROMIUM="$CHROMIUM"
  log "operator view: $CTL_BIN, $("$CHROMIUM" --version 2>/dev/null | head -n1)"
fi

# ---- webhook certificate (CA + serving cert for 127.0.0.1 and the in-cluster Service name) ---------
PKI="$WORK/webhook-pki"
mkdir -p "$PKI"
if [[ ! -s "$PKI/tls.crt" ]]; then
  openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=gpusched-e2e-webhook-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$PKI/ca.crt" 2>/dev/null
  openssl genrsa -out "$PKI/tls.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/tls.key" -subj "/CN=gpusched-kube.gpusched-system.svc" -out "$PKI/tls.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:gpusched-kube.gpusched-system.svc" >"$PKI/tls.ext"
  openssl x509 -req -in "$PKI/tls.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 825 -sha256 -extfile "$PKI/tls.ext" -out "$PKI/tls.crt" 2>/dev/null
fi

# ---- control plane, with the scheduler configuration from deploy/ -------------------------------
EXT_PORT="$(free_port)"
WH_PORT="$(free_port)"
SCHED_SRC="$REPO/deploy/manifests/kube-scheduler-config.yaml"
grep -q 'urlPrefix: "http://gpusched-kube.gpusched-system.svc:8888"' "$SCHED_SRC" ||
  die "$SCHED_SRC: extender urlPrefix not found (the sed below would not apply)"
sed "s#http://gpusched-kube.gpusched-system.svc:8888#http://127.0.0.1:$EXT_PORT#" "$SCHED_SRC" >"$WORK/scheduler-config.yaml"
# E2E_SCHEDULER_QPS (bench.sh): kube-scheduler's client rate limit, QPS and burst (default 50/100).
if [[ -n "${E2E_SCHEDULER_QPS:-}" ]]; then
  printf 'clientConnection:\n  qps: %s\n  burst: %s\n' "$E2E_SCHEDULER_QPS" "$((2 * E2E_SCHEDULER_QPS))" >>"$WORK/scheduler-config.yaml"
fi
log "starting a fresh control plane in $CLUSTER (extender at 127.0.0.1:$EXT_PORT)"
"$HERE/cluster-down.sh" "$CLUSTER" >/dev/null 2>&1 || true
KUBE_SCHEDULER_CONFIG="$WORK/scheduler-config.yaml" "$HERE/cluster-up.sh" "$CLUSTER" >/dev/null
# shellcheck disable=SC1091
. "$CLUSTER/env.sh"

# ---- Jaeger: the service's and the shim's traces (OTLP/gRPC), read back through its query API --------
SERVER_ENV=()
if [[ "${E2E_TRACES:-1}" != 0 ]]; then
  JAEGER_BIN="$("$HERE/build-jaeger.sh" | tail -n1)"
  JAEGER_OTLP_GRPC_PORT="$(free_port)"; JAEGER_QUERY_PORT="$(free_port)"
  JAEGER_QUERY_GRPC_PORT="$(free_port)"; JAEGER_HEALTH_PORT="$(free_port)"
  export JAEGER_OTLP_GRPC_PORT JAEGER_QUERY_PORT JAEGER_QUERY_GRPC_PORT JAEGER_HEALTH_PORT
  "$JAEGER_BIN" --config "$HERE/jaeger.yaml" >"$WORK/jaeger.log" 2>&1 &
  JAEGER_PID=$!
  for _ in $(seq 100); do
    curl -fsS "http://127.0.0.1:$JAEGER_HEALTH_PORT/status" 2>/dev/null | grep -q '"healthy":true' && break
    kill -0 "$JAEGER_PID" 2>/dev/null || die "Jaeger exited: $(tail -n 20 "$WORK/jaeger.log")"
    sleep 0.2
  done
  curl -fsS "http://127.0.0.1:$JAEGER_HEALTH_PORT/status" 2>/dev/null | grep -q '"healthy":true' ||
    die "Jaeger not healthy: $(tail -n 20 "$WORK/jaeger.log")"
  OTLP="http://127.0.0.1:$JAEGER_OTLP_GRPC_PORT"
  export E2E_JAEGER_QUERY="127.0.0.1:$JAEGER_QUERY_PORT"
  # Each binary's own OTLP key; spans batched every 500 ms instead of 5 s.
  SERVER_ENV=("GPUSCHED_SERVER_TELEMETRY__OTLP_ENDPOINT=$OTLP" OTEL_BSP_SCHEDULE_DELAY=500)
  export GPUSCHED_KUBE_TELEMETRY__OTLP_ENDPOINT="$OTLP" OTEL_BSP_SCHEDULE_DELAY=500
  log "Jaeger $("$JAEGER_BIN" version 2>/dev/null | sed -n 's/.*"gitVersion":"\([^"]*\)".*/\1/p'): OTLP $OTLP, query http://$E2E_JAEGER_QUERY"
fi

# ---- gpusched-server -------------------------------------------------------------------------------
env "${SERVER_ENV[@]}" "$SERVER_BIN" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$WORK/server.out" 2>"$WORK/server.log" &
SERVER_PID=$!
SERVICE_ADDR=""
for _ in $(seq 100); do
  SERVICE_ADDR="$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$WORK/server.out" 2>/dev/null | head -n1)"
  [[ -n "$SERVICE_ADDR" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || die "gpusched-server exited: $(tail -n 20 "$WORK/server.log")"
  sleep 0.1
done
[[ -n "$SERVICE_ADDR" ]] || die "gpusched-server did not print its address"
log "gpusched-server at $SERVICE_ADDR"
# For the bursts' measurements (CPU per pod, node-set hits; see deploy/e2e/bench.sh).
export E2E_SERVER_PID="$SERVER_PID"
E2E_SERVER_METRICS="$(sed -n 's/.*metrics=\([^ ]*\).*/\1/p' "$WORK/server.out" | head -n1)"
export E2E_SERVER_METRICS

# ---- manifests of deploy/: all validated by the apiserver; RBAC and webhooks applied --------------
log "validating every manifest of deploy/ server-side (kubectl apply --dry-run=server -k deploy/)"
kubectl apply -f deploy/manifests/namespace.yaml >/dev/null
kubectl apply --dry-run=server -k deploy/ >"$WORK/dry-run.txt" || die "server-side validation of deploy/ failed"
# The agent's manifests (deploy/agent/, owned by the agent) are validated too, as a warning only.
if [[ -f deploy/agent/daemonset.yaml ]]; then
  kubectl apply --dry-run=server -f deploy/agent/daemonset.yaml >>"$WORK/dry-run.txt" 2>&1 ||
    log "WARNING: deploy/agent/daemonset.yaml does not pass server-side validation (see $WORK/dry-run.txt)"
fi
kubectl apply -f deploy/manifests/kube-rbac.yaml >/dev/null
TOKEN="$(kubectl -n gpusched-system create token gpusched-kube --duration=2h)"
cat >"$WORK/shim.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $APISERVER_URL
    certificate-authority: $KUBE_CA_FILE
users:
- name: gpusched-kube
  user:
    token: $TOKEN
contexts:
- name: gpusched-kube@e2e
  context: {cluster: e2e, user: gpusched-kube, namespace: gpusched-system}
current-context: gpusched-kube@e2e
KCFG
chmod 600 "$WORK/shim.kubeconfig"
# The token is bound by exactly that RBAC: check a few things it may and may not do.
SA=(--kubeconfig "$WORK/shim.kubeconfig")
[[ "$(kubectl "${SA[@]}" auth can-i create pods --subresource=binding -A)" == yes ]] || die "SA cannot bind pods"
[[ "$(kubectl "${SA[@]}" auth can-i watch nodes 2>/dev/null)" == yes ]] || die "SA cannot watch nodes"
[[ "$(kubectl "${SA[@]}" auth can-i watch resourcequotas -A 2>/dev/null)" == yes ]] || die "SA cannot watch resourcequotas"
[[ "$(kubectl "${SA[@]}" auth can-i update resourcequotas -A 2>/dev/null || true)" == no ]] || die "SA may change resourcequotas"
[[ "$(kubectl "${SA[@]}" auth can-i update leases/gpusched-kube -n gpusched-system)" == yes ]] || die "SA cannot update its lease"
[[ "$(kubectl "${SA[@]}" auth can-i patch pods -A 2>/dev/null || true)" == no ]] || die "SA may patch pods (more than needed)"
# Preemption: evict (Eviction API), pod status (nomination, victims' condition), read budgets.
[[ "$(kubectl "${SA[@]}" auth can-i create pods --subresource=eviction -A)" == yes ]] || die "SA cannot evict pods"
[[ "$(kubectl "${SA[@]}" auth can-i patch pods --subresource=status -A)" == yes ]] || die "SA cannot patch pod status"
[[ "$(kubectl "${SA[@]}" auth can-i watch poddisruptionbudgets.policy -A)" == yes ]] || die "SA cannot watch PodDisruptionBudgets"
[[ "$(kubectl "${SA[@]}" auth can-i delete pods -A 2>/dev/null || true)" == no ]] || die "SA may delete pods (evictions only)"
[[ "$(kubectl "${SA[@]}" auth can-i update leases/kube-scheduler -n kube-system 2>/dev/null || true)" == no ]] || die "SA may touch other leases"

CA_B64="$(base64 -w0 <"$PKI/ca.crt")"
WEBHOOKS_SRC="$REPO/deploy/manifests/webhooks.yaml"
for p in validate mutate; do
  grep -q "service: {name: gpusched-kube, namespace: gpusched-system, path: /$p, port: 443}" "$WEBHOOKS_SRC" ||
    die "$WEBHOOKS_SRC: clientConfig for /$p not found (the sed below would not apply)"
done
sed -e "s#service: {name: gpusched-kube, namespace: gpusched-system, path: \(/[a-z]*\), port: 443}#url: \"https://127.0.0.1:$WH_PORT\1\"#" \
    -e "s|# caBundle: <base64 CA PEM>|caBundle: $CA_B64|" "$WEBHOOKS_SRC" >"$WORK/webhooks.yaml"
kubectl apply -f "$WORK/webhooks.yaml" >/dev/null
log "applied RBAC and webhook configurations from deploy/ (webhooks at https://127.0.0.1:$WH_PORT)"
# The ValidatingAdmissionPolicies as deploy/ has them (decision annotations are the shim's
# ServiceAccount's alone; GPU pods unbound, ours, no memory/cores without a card). The API
# server loads them asynchronously: wait until a forged pod is denied (server-side dry run).
kubectl apply -f deploy/manifests/admission-policies.yaml >/dev/null
FORGED='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"policy-probe","annotations":{"hami.io/vgpu-node":"x"}},"spec":{"containers":[{"name":"c","image":"x"}]}}'
for i in $(seq 100); do
  if ! out="$(kubectl -n gpusched-system create --dry-run=server -f - <<<"$FORGED" 2>&1)"; then
    grep -q 'hami.io/vgpu-node' <<<"$out" && break
  fi
  (( i < 100 )) || die "the admission policies of deploy/manifests/admission-policies.yaml are not enforced: $out"
  sleep 0.2
done
log "applied the admission policies from deploy/ (enforced)"

# ---- the scenarios ---------------------------------------------------------------------------------
export GPUSCHED_E2E=1
export E2E_WORKDIR="$WORK"
export E2E_SHIM_BIN="$KUBE_SHIM_BIN"
export E2E_SHIM_KUBECONFIG="$WORK/shim.kubeconfig"
export E2E_SERVICE_ADDR="http://$SERVICE_ADDR"
export E2E_EXTENDER_PROXY_PORT="$EXT_PORT"
export E2E_WEBHOOK_PROXY_PORT="$WH_PORT"
export E2E_WEBHOOK_CERT="$PKI/tls.crt"
export E2E_WEBHOOK_KEY="$PKI/tls.key"
export E2E_WEBHOOKS_FILE="$WORK/webhooks.yaml"
export E2E_SCHEDULER_KUBECONFIG="$CLUSTER/scheduler.kubeconfig"
export E2E_RESULTS="$WORK/results.md"
export E2E_AGENT_BIN="$AGENT_BIN"
export E2E_FAKE_NVML="$FAKE_NVML"
rm -f "$E2E_RESULTS"
log "running clients/kube/tests/e2e/ (test target e2e)"
nice cargo test -q -p gpusched-kube --test e2e -- --ignored --nocapture --test-threads=1

if [[ "${E2E_UPDATE_SCREENSHOT:-0}" == 1 ]]; then
  [[ -s "$WORK/operator-view.png" ]] || die "no screenshot in $WORK/operator-view.png (did the opview scenario run?)"
  mkdir -p "$REPO/docs/images"
  cp "$WORK/operator-view.png" "$REPO/docs/images/operator-view.png"
  log "wrote docs/images/operator-view.png"
fi
if [[ -s "$E2E_RESULTS" ]]; then
  log "results:"
  cat "$E2E_RESULTS" >&2
  if [[ "${E2E_UPDATE_README:-0}" == 1 ]]; then
    python3 - "$HERE/README.md" "$E2E_RESULTS" <<'PY'
import sys, re
readme, results = sys.argv[1], open(sys.argv[2]).read().strip()
text = open(readme).read()
block = "<!-- e2e-results:begin -->\n" + results + "\n<!-- e2e-results:end -->"
if "<!-- e2e-results:begin -->" in text:
    text = re.sub(r"<!-- e2e-results:begin -->.*?<!-- e2e-results:end -->", lambda m: block, text, flags=re.S)
else:
    text = text.rstrip() + "\n\n## Measured results (last `E2E_UPDATE_README=1 deploy/e2e/test.sh`)\n\n" + block + "\n"
open(readme, "w").write(text)
PY
    log "wrote the results into deploy/e2e/README.md"
  fi
fi
log "PASS"
