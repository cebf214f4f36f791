# Sourced by the client suites (clients/go/test.sh, clients/python/test.sh): sets
# GPUSCHED_SERVER_BIN to the gpusched-server binary to test against, building it with cargo
# unless GPUSCHED_SERVER_BIN is already set or GPUSCHED_SKIP_CARGO_BUILD=1.
# Needs REPO (the repository root) and step (a progress printer) from the caller.
if [[ -z "${GPUSCHED_SERVER_BIN:-}" ]]; then
  target="${CARGO_TARGET_DIR:-target}"
  [[ "$target" = /* ]] || target="$REPO/$target"
  if [[ "${GPUSCHED_SKIP_CARGO_BUILD:-0}" != 1 ]]; then
    step "cargo build -p gpusched-service"
    if ! (cd "$REPO" && cargo build -p gpusched-service); then
      if [[ "${GPUSCHED_ALLOW_SKIP:-0}" == 1 ]]; then
        echo "test.sh: cargo build failed; GPUSCHED_ALLOW_SKIP=1, live-server tests will be skipped" >&2
      else
        exit 1
      fi
    fi
  fi
  export GPUSCHED_SERVER_BIN="$target/debug/gpusched-server"
fi
echo "server binary: $GPUSCHED_SERVER_BIN" >&2
