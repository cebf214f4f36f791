#!/usr/bin/env bash
# Create (or update) a fake, schedulable Node in the e2e cluster. There is no kubelet: the Node
# object alone is what kube-scheduler looks at.
#
#   deploy/e2e/make-node.sh NAME [GPUS]          # GPUS default 4
#
# Env: KUBECONFIG (or E2E_WORKDIR/env.sh), KUBECTL, NODE_CPU (default 32), NODE_MEMORY (256Gi),
#      NODE_PODS (110), GPU_RESOURCE (nvidia.com/gpu), NODE_LABELS ("k=v,k2=v2", extra labels)
#
# What makes a hand-made Node schedulable without kubelet and node controller:
#  1. status.capacity/allocatable with pods > 0, cpu, memory and the GPU extended resource
#     (written through the status subresource, as a kubelet would);
#  2. no node.kubernetes.io/not-ready:NoSchedule taint: the TaintNodesByCondition admission
#     plugin adds it on every Node create and only the node lifecycle controller (not running
#     here) would remove it, so this script removes it after the create;
#  3. a Ready=True condition (kube-scheduler does not read conditions, but tools that list ready
#     nodes do), and spec.unschedulable unset.
set -euo pipefail

NAME="${1:?usage: make-node.sh NAME [GPUS]}"
GPUS="${2:-4}"
CPU="${NODE_CPU:-32}"
MEMORY="${NODE_MEMORY:-256Gi}"
PODS="${NODE_PODS:-110}"
GPU_RESOURCE="${GPU_RESOURCE:-nvidia.com/gpu}"

if [[ -z "${KUBECONFIG:-}" ]]; then
  env_file="${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}/env.sh"
  # shellcheck disable=SC1090
  [[ -f "$env_file" ]] && . "$env_file"
fi
[[ -n "${KUBECONFIG:-}" ]] || { echo "make-node: KUBECONFIG not set and no env.sh found" >&2; exit 1; }
KUBECTL="${KUBECTL:-kubectl}"

labels="    kubernetes.io/hostname: \"$NAME\"
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    gpusched.e2e/fake-node: \"true\""
if [[ -n "${NODE_LABELS:-}" ]]; then
  IFS=, read -r -a extra <<<"$NODE_LABELS"
  for kv in "${extra[@]}"; do labels+=$'\n'"    ${kv%%=*}: \"${kv#*=}\""; done
fi

"$KUBECTL" apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $NAME
  labels:
$labels
spec: {}
NODE

now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
res="{\"cpu\":\"$CPU\",\"memory\":\"$MEMORY\",\"pods\":\"$PODS\",\"ephemeral-storage\":\"100Gi\",\"$GPU_RESOURCE\":\"$GPUS\"}"
cond() { printf '{"type":"%s","status":"%s","reason":"%s","message":"fake node (gpusched e2e)","lastHeartbeatTime":"%s","lastTransitionTime":"%s"}' "$1" "$2" "$3" "$now" "$now"; }
status="{\"status\":{\"capacity\":$res,\"allocatable\":$res,\"conditions\":[$(cond Ready True KubeletReady),$(cond MemoryPressure False KubeletHasSufficientMemory),$(cond DiskPressure False KubeletHasNoDiskPressure),$(cond PIDPressure False KubeletHasSufficientPID),$(cond NetworkUnavailable False RouteCreated)],\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},{\"type\":\"Hostname\",\"address\":\"$NAME\"}],\"nodeInfo\":{\"architecture\":\"amd64\",\"operatingSystem\":\"linux\",\"kubeletVersion\":\"fake\",\"containerRuntimeVersion\":\"fake://0\",\"kernelVersion\":\"\",\"osImage\":\"\",\"kubeProxyVersion\":\"\",\"machineID\":\"\",\"systemUUID\":\"\",\"bootID\":\"\"}}}"
"$KUBECTL" patch node "$NAME" --subresource=status --type=merge -p "$status" >/dev/null

# Drop the not-ready taint added at create time (absent on an update: ignore that error).
"$KUBECTL" taint nodes "$NAME" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
"$KUBECTL" taint nodes "$NAME" node.kubernetes.io/unreachable:NoSchedule- >/dev/null 2>&1 || true

echo "node/$NAME ready: $GPU_RESOURCE=$GPUS cpu=$CPU memory=$MEMORY pods=$PODS"
