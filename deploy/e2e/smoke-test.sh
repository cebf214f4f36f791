#!/usr/bin/env bash
# End-to-end check of the local control plane: a fake GPU node, a pod asking for one GPU, and
# kube-scheduler binding it (spec.nodeName set) without any kubelet.
#
#   deploy/e2e/smoke-test.sh [WORKDIR]    # starts the cluster if needed; leaves it running
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKDIR="${1:-${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}}"

"$HERE/cluster-up.sh" "$WORKDIR" >/dev/null
# shellcheck disable=SC1091
. "$WORKDIR/env.sh"

NODE="${SMOKE_NODE:-gpu-node-1}"
NS="smoke-$$-$RANDOM"
POD=gpu-pod
"$HERE/make-node.sh" "$NODE" 4
kubectl create namespace "$NS" >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $POD
spec:
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      limits:
        nvidia.com/gpu: 1
POD

node=""
for _ in $(seq 60); do
  node="$(kubectl -n "$NS" get pod "$POD" -o jsonpath='{.spec.nodeName}')"
  [[ -n "$node" ]] && break
  sleep 0.5
done
kubectl get nodes -o wide
kubectl -n "$NS" get pod "$POD" -o wide
if [[ "$node" != "$NODE" ]]; then
  echo "FAIL: pod $NS/$POD not bound (nodeName='$node')" >&2
  kubectl -n "$NS" describe pod "$POD" >&2 || true
  exit 1
fi
kubectl -n "$NS" get pod "$POD" -o jsonpath='{range .status.conditions[*]}{.type}={.status}{"\n"}{end}'
echo "PASS: pod $NS/$POD bound to node $node by kube-scheduler"
# Namespaces never finish deleting here (no namespace controller): delete the pod only.
kubectl -n "$NS" delete pod "$POD" --grace-period=0 --force >/dev/null 2>&1 || true
