#!/usr/bin/env bash
# Throughput benchmark of the Kubernetes path at scale: release builds, BENCH_NODES fake nodes x
# BENCH_CARDS cards, a BENCH_PODS-pod burst through kube-scheduler + the gpusched extender, then
# the same burst on the same number of nodes for a plain kube-scheduler with GPUs as an extended
# resource (3 per card), both bursts through the same admission path (the two webhooks).
# It is deploy/e2e/test.sh with only the burst and baseline scenarios, sized by E2E_BURST_*.
#
#   deploy/e2e/bench.sh                      # 1,000 nodes x 8 cards, 300 pods
#   BENCH_NODES=200 BENCH_PODS=200 deploy/e2e/bench.sh
#
# Reports (stdout and $E2E_TEST_WORKDIR/results.md): pods/s of each, the ratio, p50/p99
# time-to-bind (pod create returned -> bind seen by a watch), CPU ms per bound pod of
# gpusched-kube, kube-scheduler, gpusched-server and kube-apiserver (/proc/<pid>/stat), cards
# over-booked (the run fails if any), gpusched-server's node-set hits/misses during the burst.
#
# Env: BENCH_NODES (1000), BENCH_CARDS (8), BENCH_PODS (300), E2E_TEST_WORKDIR (default
#      ${TMPDIR:-/tmp}/gpusched-bench), CARGO_TARGET_DIR, E2E_SHIM_LOG (default info),
#      GPUSCHED_SERVER_BIN + GPUSCHED_KUBE_BIN (prebuilt binaries: nothing is built),
#      BENCH_SCHEDULER_QPS (client QPS of both kube-schedulers, burst twice that; default: their
#      default 50/100, which holds the plain kube-scheduler's Binding calls at ~70 pods/s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
export E2E_TEST_WORKDIR="${E2E_TEST_WORKDIR:-${TMPDIR:-/tmp}/gpusched-bench}"
mkdir -p "$E2E_TEST_WORKDIR/bin"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"

# Build here and copy the binaries, so that a later build in the same target directory cannot
# swap them under the run.
# (GPUSCHED_SERVER_BIN and GPUSCHED_KUBE_BIN both set: those binaries, nothing built.)
if [[ -z "${GPUSCHED_SERVER_BIN:-}" || -z "${GPUSCHED_KUBE_BIN:-}" ]]; then
  echo "[bench] building gpusched-server and gpusched-kube (release)" >&2
  nice cargo build -q --release -p gpusched-service -p gpusched-kube
  cp "$TARGET_DIR/release/gpusched-server" "$TARGET_DIR/release/gpusched-kube" "$E2E_TEST_WORKDIR/bin/"
  export GPUSCHED_SERVER_BIN="$E2E_TEST_WORKDIR/bin/gpusched-server"
  export GPUSCHED_KUBE_BIN="$E2E_TEST_WORKDIR/bin/gpusched-kube"
fi
export E2E_RELEASE=1
export E2E_FILTER=burst,baseline
export E2E_BURST_NODES="${BENCH_NODES:-1000}"
export E2E_BURST_CARDS="${BENCH_CARDS:-8}"
export E2E_BURST_PODS="${BENCH_PODS:-300}"
export E2E_BURST_SAME_ADMISSION=1
if [[ -n "${BENCH_SCHEDULER_QPS:-}" ]]; then export E2E_SCHEDULER_QPS="$BENCH_SCHEDULER_QPS"; fi
echo "[bench] $E2E_BURST_NODES nodes x $E2E_BURST_CARDS cards, $E2E_BURST_PODS pods (work dir $E2E_TEST_WORKDIR)" >&2
"$HERE/test.sh"
cat "$E2E_TEST_WORKDIR/results.md"
