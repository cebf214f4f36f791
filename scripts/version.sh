#!/usr/bin/env bash
# The version of gpusched has one source: [workspace.package] version in Cargo.toml (every
# crate inherits it). The other clients and the chart carry a copy that this script checks/sets.
#
#   scripts/version.sh              print it (e.g. 0.1.0)
#   scripts/version.sh --check      fail unless every copy agrees:
#                                     clients/python/pyproject.toml        [project] version
#                                     clients/python/src/gpusched/__init__.py  __version__
#                                     clients/go/gpusched/version.go       const Version
#                                     deploy/helm/gpusched/Chart.yaml      version, appVersion
#                                     every crate of the workspace         version.workspace = true
#   scripts/version.sh --set X.Y.Z  write X.Y.Z into Cargo.toml and every copy (then run
#                                   `cargo update --workspace` to refresh Cargo.lock and
#                                   deploy/render.sh for the image tags of the plain manifests)
# The Go module's published version is its tag: clients/go/vX.Y.Z.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

workspace_version() {
  awk '/^\[workspace\.package\]/ { on = 1; next } /^\[/ { on = 0 }
       on && /^version *= *"/ { gsub(/^version *= *"|".*$/, ""); print; exit }' Cargo.toml
}
V="$(workspace_version)"
[[ "$V" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || { echo "version.sh: no [workspace.package] version in Cargo.toml" >&2; exit 1; }

PY=clients/python/pyproject.toml
PYINIT=clients/python/src/gpusched/__init__.py
GO=clients/go/gpusched/version.go
CHART=deploy/helm/gpusched/Chart.yaml

copies() { # name<TAB>value per copy
  printf 'python pyproject.toml\t%s\n' "$(sed -n 's/^version = "\(.*\)"$/\1/p' "$PY" | head -n1)"
  printf 'python __version__\t%s\n' "$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$PYINIT" | head -n1)"
  printf 'go Version\t%s\n' "$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$GO" | head -n1)"
  printf 'chart version\t%s\n' "$(sed -n 's/^version: \(.*\)$/\1/p' "$CHART" | head -n1)"
  printf 'chart appVersion\t%s\n' "$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' "$CHART" | head -n1)"
}

case "${1:-}" in
  "") echo "$V" ;;
  --check)
    bad=0
    while IFS=$'\t' read -r name value; do
      if [[ "$value" != "$V" ]]; then echo "version.sh: $name is '${value}', Cargo.toml says $V" >&2; bad=1; fi
    done < <(copies)
    for toml in $(awk '/^members *=/ { on = 1; next } on && /\]/ { exit } on { gsub(/[",[:space:]]/, ""); if ($0 != "") print $0 "/Cargo.toml" }' Cargo.toml); do
      grep -q '^version.workspace = true$' "$toml" || { echo "version.sh: $toml does not inherit the workspace version" >&2; bad=1; }
    done
    (( bad == 0 )) || exit 1
    echo "version $V: Cargo workspace, Python, Go, Helm chart agree"
    ;;
  --set)
    N="${2:?usage: scripts/version.sh --set X.Y.Z}"
    [[ "$N" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$ ]] || { echo "version.sh: not a version: $N" >&2; exit 2; }
    awk -v n="$N" '/^\[workspace\.package\]/ { on = 1 } /^\[/ && !/^\[workspace\.package\]/ { on = 0 }
         on && /^version *= *"/ { $0 = "version = \"" n "\"" } { print }' Cargo.toml >Cargo.toml.tmp && mv Cargo.toml.tmp Cargo.toml
    sed -i "s/^version = \".*\"$/version = \"$N\"/" "$PY"
    sed -i "s/^__version__ = \".*\"$/__version__ = \"$N\"/" "$PYINIT"
    sed -i "s/^const Version = \".*\"$/const Version = \"$N\"/" "$GO"
    sed -i "s/^version: .*$/version: $N/; s/^appVersion: .*$/appVersion: \"$N\"/" "$CHART"
    "$0" --check
    ;;
  *) echo "usage: scripts/version.sh [--check | --set X.Y.Z]" >&2; exit 2 ;;
esac
