#!/usr/bin/env bash
# Tests of the Python client: mypy --strict on the wrapper, examples and tests, then pytest
# against a live gpusched-server. Runnable from any directory; extra arguments go to pytest.
#
# Environment:
#   GPUSCHED_CACHE            cache dir (default ~/.cache/gpusched); the venv is $GPUSCHED_CACHE/py-venv-<hash of this checkout's path>
#   GPUSCHED_SERVER_BIN       server binary to test against (then nothing is built)
#   CARGO_TARGET_DIR          honoured when building and locating the server
#   GPUSCHED_SKIP_CARGO_BUILD=1  do not run cargo (use the binary already in the target dir)
#   GPUSCHED_ALLOW_SKIP=1     skip (instead of fail) the live-server tests when there is no binary
#   GPUSCHED_SKIP_GEN_CHECK=1 do not verify that the checked-in generated code is up to date
#   PYTHON                    interpreter for the venv (default python3)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}"
# One venv per checkout: the package is installed editable from this checkout's path, so two
# checkouts sharing one venv would rebuild it under each other.
VENV="$CACHE/py-venv-$(printf '%s' "$HERE" | sha256sum | cut -c1-12)"
PYTHON="${PYTHON:-python3}"
mkdir -p "$CACHE"

step() { printf '\n== %s\n' "$*" >&2; }

# --- venv with the package (editable) and the pinned test tools ---------------------------------
step "python venv $VENV"
(
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV.lock"
    flock 9
  fi
  want="$(cat "$HERE/requirements-test.txt" "$HERE/pyproject.toml" | sha256sum | cut -d' ' -f1) $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') $HERE"
  have=""
  [[ -f "$VENV/.gpusched-stamp" ]] && have="$(cat "$VENV/.gpusched-stamp")"
  if [[ "$want" != "$have" || ! -x "$VENV/bin/python" ]]; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-virtualenv \
      -e "$HERE" -r "$HERE/requirements-test.txt"
    "$VENV/bin/python" -m pip check
    echo "$want" > "$VENV/.gpusched-stamp"
  fi
)

# --- generated code up to date ------------------------------------------------------------------
if [[ "${GPUSCHED_SKIP_GEN_CHECK:-0}" != 1 ]]; then
  step "generate.sh --check"
  "$HERE/generate.sh" --check
fi

# --- the server binary --------------------------------------------------------------------------
# shellcheck source=../../scripts/server-bin.sh
source "$REPO/scripts/server-bin.sh"

cd "$HERE"

# --- types --------------------------------------------------------------------------------------
step "mypy --strict (src/gpusched without _gen, examples, tests)"
"$VENV/bin/python" -m mypy --strict --cache-dir "$CACHE/py-mypy-cache"

# --- tests --------------------------------------------------------------------------------------
step "pytest"
"$VENV/bin/python" -m pytest -o cache_dir="$CACHE/py-pytest-cache" "$@"
