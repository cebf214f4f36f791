#!/usr/bin/env bash
# Stop the control plane started by cluster-up.sh in WORKDIR (default as in cluster-up.sh).
#   deploy/e2e/cluster-down.sh [WORKDIR] [--purge]     # --purge also removes WORKDIR
# Only the PIDs recorded in WORKDIR (env.sh, or the *.pid files) are signalled, and only when the
# process still runs the expected binary.
set -uo pipefail

WORKDIR="${1:-${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}}"
PURGE=0
for a in "$@"; do [[ "$a" == --purge ]] && PURGE=1; done
[[ "$WORKDIR" == --purge ]] && WORKDIR="${E2E_WORKDIR:-${TMPDIR:-/tmp}/gpusched-e2e}"
log() { echo "[cluster-down] $*" >&2; }

if [[ ! -d "$WORKDIR" ]]; then log "no work dir $WORKDIR; nothing to do"; exit 0; fi

ETCD_PID="" APISERVER_PID="" SCHEDULER_PID=""
if [[ -f "$WORKDIR/env.sh" ]]; then
  ETCD_PID=$(sed -n 's/^export ETCD_PID=//p' "$WORKDIR/env.sh")
  APISERVER_PID=$(sed -n 's/^export APISERVER_PID=//p' "$WORKDIR/env.sh")
  SCHEDULER_PID=$(sed -n 's/^export SCHEDULER_PID=//p' "$WORKDIR/env.sh")
fi
# cluster-up.sh also records PIDs as soon as each process starts (covers a failed start).
for n in etcd kube-apiserver kube-scheduler; do
  if [[ -s "$WORKDIR/$n.pid" ]]; then
    p=$(cat "$WORKDIR/$n.pid")
    case $n in etcd) ETCD_PID=${ETCD_PID:-$p} ;; kube-apiserver) APISERVER_PID=${APISERVER_PID:-$p} ;; kube-scheduler) SCHEDULER_PID=${SCHEDULER_PID:-$p} ;; esac
  fi
done

runs() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "$2"; }

stop() { # pid name
  local pid="$1" name="$2"
  if ! runs "$pid" "$name"; then return 0; fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do runs "$pid" "$name" || return 0; sleep 0.2; done
  log "$name did not stop after 10s; killing"
  kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 25); do runs "$pid" "$name" || return 0; sleep 0.2; done
}

# Reverse order of start.
stop "$SCHEDULER_PID" kube-scheduler
stop "$APISERVER_PID" kube-apiserver
stop "$ETCD_PID" etcd
rm -f "$WORKDIR/env.sh" "$WORKDIR"/*.pid
if (( PURGE )); then rm -rf "$WORKDIR"; log "removed $WORKDIR"; fi
log "stopped"
