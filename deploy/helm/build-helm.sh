#!/usr/bin/env bash
# Build (or reuse the cached) helm from the Go module proxy into a cache outside the repo, keyed
# by version (the same scheme as deploy/e2e/build-kube.sh).
#
#   deploy/helm/build-helm.sh          # prints the helm binary path on the last line of stdout
#
# Env:
#   HELM_VERSION     helm.sh/helm/v3 version (default v3.22.0)
#   GPUSCHED_CACHE   cache root (default $HOME/.cache/gpusched); binary in $GPUSCHED_CACHE/helm/$HELM_VERSION/bin/helm
#   GO               go binary (default: go on PATH, else /usr/local/go/bin/go)
#   HELM_BUILD_NICE  nice level for the build (default 10)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
ROOT="$CACHE/helm/$HELM_VERSION"
BIN="$ROOT/bin"
NICE="${HELM_BUILD_NICE:-10}"
log() { echo "[build-helm] $*" >&2; }

if [[ -z "${GO:-}" ]]; then
  if command -v go >/dev/null 2>&1; then GO="$(command -v go)"; else GO=/usr/local/go/bin/go; fi
fi
mkdir -p "$BIN"

have_helm() { [[ -x "$BIN/helm" ]] && "$BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; }

# One build at a time per version.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$ROOT/.lock"
  flock 9
fi

if have_helm; then
  log "cached: $BIN/helm ($HELM_VERSION)"
else
  [[ -x "$GO" ]] || { log "go not found (set GO=...)"; exit 1; }
  # helm's Makefile stamps the version and the default Kubernetes version of `helm template`
  # (.Capabilities.KubeVersion without a cluster) from its k8s.io/client-go v0.X.Y: 1.X.
  gomod="$(GOFLAGS=-mod=mod "$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || { log "could not download helm.sh/helm/v3@$HELM_VERSION"; exit 1; }
  k8s_minor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -n1)"
  [[ -n "$k8s_minor" ]] || { log "no k8s.io/client-go in $gomod"; exit 1; }
  log "building helm $HELM_VERSION (default kube version 1.$k8s_minor) into $BIN"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$k8s_minor"
  done
  # helm's go.mod has no replace directives, so `go install module@version` builds it as released.
  GOBIN="$BIN" GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n "$NICE" \
    "$GO" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  have_helm || { log "built helm does not report $HELM_VERSION: $("$BIN/helm" version 2>&1)"; exit 1; }
  log "built $BIN/helm"
fi
echo "$BIN/helm"
