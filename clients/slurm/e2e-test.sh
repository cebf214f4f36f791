#!/usr/bin/env bash
# End-to-end test of the gpusched Slurm adapter on a real Slurm 22.05 cluster on this machine:
# a private munged, slurmctld and two slurmd (node1, node2) on 127.0.0.1, a gpusched-server,
# node inventories from the real gpusched-agent over a fake NVML library (4 cards per node),
# gres.conf/slurm.conf lines from `gpusched-slurm conf`, and jobs submitted with
# gpusched-sbatch that print what they see; last, slurmdbd on a private MariaDB and the GPU
# limits (GrpTRES) of accounts and QOS. Needs root (installs slurm-wlm, munge, slurmdbd and
# mariadb-server from Debian when missing). Every process it starts is stopped on exit; every
# wait is bounded.
#
#   clients/slurm/e2e-test.sh            # prints one line per check and "N passed, 0 failed"
#   KEEP=1 clients/slurm/e2e-test.sh     # keep the work directory (logs, configs)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
T_START=$(date +%s)
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }
check() { # check "description" command...
  local d=$1; shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}
die() { echo "e2e: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (slurmd, munged, apt-get)"

# --- 1. Slurm and munge from Debian, only when missing ------------------------------------
need=()
for c in slurmctld slurmd sbatch squeue sinfo scontrol scancel munged munge slurmdbd sacctmgr \
  mariadbd mariadb-install-db; do
  command -v "$c" >/dev/null 2>&1 || need+=("$c")
done
# slurmdbd and MariaDB: accounting, for the GPU limits of accounts and QOS (the last scenario).
PKGS="slurm-wlm munge slurmdbd mariadb-server"
if [ ${#need[@]} -gt 0 ]; then
  echo "e2e: installing $PKGS (missing: ${need[*]})"
  if ! DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q $PKGS >/dev/null 2>&1; then
    timeout 300 apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q $PKGS >/dev/null
  fi
fi
for p in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm; do
  [ -d "$p" ] && PLUGINDIR=$p
done
command -v python3 >/dev/null || die "needs python3 (JSON checks)"
command -v cc >/dev/null || die "needs a C compiler (fake NVML library)"

# --- 2. Build ------------------------------------------------------------------------------
echo "e2e: building gpusched-server, gpusched-agent, gpusched-slurm"
nice cargo build -q -p gpusched-service -p gpusched-agent -p gpusched-slurm
BIN=$CARGO_TARGET_DIR/debug
for b in gpusched-server gpusched-agent gpusched-sbatch gpusched-slurm; do
  [ -x "$BIN/$b" ] || die "missing $BIN/$b"
done

# --- 3. Work directory and clean-up --------------------------------------------------------
W=$(mktemp -d /tmp/gpusched-slurm-e2e.XXXXXX)
chmod 755 "$W"
mkdir -p "$W/inventory" "$W/out" "$W/state" "$W/munge" "$W/nvml" "$W/lat" "$W/bin"
# The binaries run as an unprivileged user too (the job owner, its TaskProlog): copy them out
# of the target directory, which may sit under a private home (/root/.cache/...).
for b in gpusched-server gpusched-agent gpusched-sbatch gpusched-slurm; do
  install -m 755 "$BIN/$b" "$W/bin/$b"
done
BIN=$W/bin
SERVER_PID=""
# Per run: a run that ends deletes the user it created, never one a concurrent run still uses.
TEST_USER=gpusched-e2e-$$
cleanup() {
  set +e
  for f in "$W"/slurmd-*.pid "$W/slurmctld.pid" "$W/slurmdbd.pid" "$W/mysql/pid" "$W/mysql.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
  sleep 1
  for f in "$W"/slurmd-*.pid "$W/slurmctld.pid" "$W/slurmdbd.pid" "$W/mysql/pid" "$W/mysql.pid"; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  # Job steps and batch scripts left by the killed slurmd are ours: slurmstepd carries our
  # SLURM_CONF, batch scripts live in our spool; a script's process group holds its children.
  for p in $(pgrep -x slurmstepd 2>/dev/null); do
    tr '\0' ' ' <"/proc/$p/environ" 2>/dev/null | grep -q "SLURM_CONF=$W/slurm.conf" && kill -9 "$p"
  done
  for p in $(pgrep -f "$W/spool-" 2>/dev/null); do
    kill -9 -- "-$(ps -o pgid= -p "$p" | tr -d ' ')" 2>/dev/null || kill -9 "$p" 2>/dev/null
  done
  [ -f "$W/munge/pid" ] && kill "$(cat "$W/munge/pid")" 2>/dev/null
  [ -f "$W/created-user" ] && userdel "$TEST_USER" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ] || [ "$FAIL" -gt 0 ]; then
    echo "e2e: work directory kept: $W"
  else
    rm -rf "$W"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS description command...
  local secs=$1 what=$2; shift 2
  local end=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${secs}s waiting for $what"
    sleep 0.2
  done
}

# --- 4. gpusched-server --------------------------------------------------------------------
"$BIN/gpusched-server" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$W/server.out" 2>"$W/server.err" &
SERVER_PID=$!
wait_for 30 "gpusched-server" grep -q 'grpc=' "$W/server.out"
ADDR=http://$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' "$W/server.out")
echo "e2e: gpusched-server at $ADDR"

# --- 5. Inventories from the real agent over a fake NVML (4 cards a node) ------------------
cc -shared -fPIC -o "$W/nvml/libnvidia-ml.so.1" clients/agent/tests/fake-nvml/fake_nvml.c -lpthread -ldl
echo "cards 4" >"$W/nvml/state"
for n in node1 node2; do
  FAKE_NVML_STATE=$W/nvml/state "$BIN/gpusched-agent" inventory --format json --node-name "$n" \
    --nvml-library "$W/nvml/libnvidia-ml.so.1" --service-address "$ADDR" >"$W/inventory/$n.json" 2>>"$W/agent.err"
done
FAKE_NVML_STATE=$W/nvml/state "$BIN/gpusched-agent" inventory --format slurm-gres --node-name node1 \
  --nvml-library "$W/nvml/libnvidia-ml.so.1" --service-address "$ADDR" >"$W/agent-gres.conf" 2>>"$W/agent.err"
"$BIN/gpusched-slurm" conf --inventory "$W/inventory" --only gres >"$W/gres.conf"
GRES1=$("$BIN/gpusched-slurm" conf --inventory "$W/inventory" --only slurm | sed -n 's/^NodeName=node1 Gres=//p')
GRES2=$("$BIN/gpusched-slurm" conf --inventory "$W/inventory" --only slurm | sed -n 's/^NodeName=node2 Gres=//p')
check "conf: node gres from the agent's inventory ($GRES1)" [ "$GRES1" = "gpuslot:40,gpumem:327680,gpucore:400" ]
check "conf: agent slurm-gres lists 4 cards" [ "$(grep -c '^NodeName=node1 Name=gpu' "$W/agent-gres.conf")" = 4 ]
UUIDS=$(python3 -c 'import json,sys; print(" ".join(c["id"] for c in json.load(open(sys.argv[1]))["cards"]))' "$W/inventory/node1.json")
read -r U0 U1 U2 U3 <<<"$UUIDS"

# --- 6. munged, slurmctld, slurmd x2 -------------------------------------------------------
dd if=/dev/urandom of="$W/munge/key" bs=1024 count=1 status=none
chown -R munge:munge "$W/munge"; chmod 700 "$W/munge"; chmod 400 "$W/munge/key"; chmod 755 "$W/munge"
runuser -u munge -- /usr/sbin/munged --socket="$W/munge/socket" --key-file="$W/munge/key" \
  --pid-file="$W/munge/pid" --log-file="$W/munge/log" --seed-file="$W/munge/seed"
CTLD_PORT=$(free_port); D1_PORT=$(free_port); D2_PORT=$(free_port)
H=$(hostname)
sed "s#/usr/local/bin/gpusched-slurm#$BIN/gpusched-slurm#" clients/slurm/task-prolog.sh >"$W/task-prolog"
chmod 755 "$W/task-prolog"
cat >"$W/slurm.conf" <<EOF
ClusterName=gpusched-e2e
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/socket
CredType=cred/munge
PluginDir=$PLUGINDIR
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool-%n
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd-%n.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
GresTypes=gpuslot,gpumem,gpucore
TaskProlog=$W/task-prolog
JobSubmitPlugins=lua
JobRequeue=1
NodeName=node1 NodeHostname=$H NodeAddr=127.0.0.1 Port=$D1_PORT CPUs=64 RealMemory=1000 Gres=$GRES1 State=UNKNOWN
NodeName=node2 NodeHostname=$H NodeAddr=127.0.0.1 Port=$D2_PORT CPUs=64 RealMemory=1000 Gres=$GRES2 State=UNKNOWN
PartitionName=gpu Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
PartitionName=one Nodes=node1 MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
PartitionName=lowone Nodes=node1 MaxTime=INFINITE State=UP OverSubscribe=FORCE:64 PriorityTier=1
PartitionName=highone Nodes=node1 MaxTime=INFINITE State=UP OverSubscribe=FORCE:64 PriorityTier=10
EOF
cp "$W/gres.conf" "$W/gres.conf.generated"
cp clients/slurm/job_submit.lua "$W/job_submit.lua"
export SLURM_CONF=$W/slurm.conf
slurmctld -i -f "$SLURM_CONF"
wait_for 30 "slurmctld" scontrol ping
slurmd -N node1 -f "$SLURM_CONF"
slurmd -N node2 -f "$SLURM_CONF"
nodes_idle() { [ "$(sinfo -h -N -p gpu -o '%N %t' | grep -c ' idle$')" = 2 ]; }
wait_for 60 "node1 and node2 idle" nodes_idle
echo "e2e: slurm up (slurmctld :$CTLD_PORT, slurmd node1 :$D1_PORT node2 :$D2_PORT)"

# --- 7. Helpers ----------------------------------------------------------------------------
export GPUSCHED_ADDRESS=$ADDR GPUSCHED_INVENTORY_DIR=$W/inventory GPUSCHED_LOCK_FILE=$W/lock
JOB='echo "START=$(date +%s.%N) NODE=$SLURMD_NODENAME CVD=${CUDA_VISIBLE_DEVICES-unset} MEM0=${CUDA_DEVICE_MEMORY_LIMIT_0-} SM=${CUDA_DEVICE_SM_LIMIT-}"; sleep 600'
# sub NAME [gpusched-sbatch args...]: submit; job id in $JID, stderr in $W/out/NAME.err, exit in $RC
sub() {
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  set +e
  JID=$(timeout 60 "$BIN/gpusched-sbatch" --parsable -J "$name" -o "$W/out/%j.out" "$@" --wrap "$JOB" 2>"$W/out/$name.err")
  RC=$?
  set -e
  local t1; t1=$(date +%s.%N)
  if [ "$RC" = 0 ]; then echo "$JID $t0 $t1" >>"$W/lat/gpusched"; fi
}
# seen ID: what the job printed (waits for it to start)
seen() {
  local f=$W/out/$1.out end=$(($(date +%s) + 60))
  until grep -q '^START=' "$f" 2>/dev/null; do
    [ "$(date +%s)" -lt "$end" ] || { echo "job $1 did not start: $(squeue -h -j "$1" -o '%T %r')" >&2; return 1; }
    sleep 0.1
  done
  grep '^START=' "$f"
}
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
comment() { squeue --json | python3 -c 'import json,sys; print(next((j["comment"] for j in json.load(sys.stdin)["jobs"] if j["job_id"]==int(sys.argv[1])),""))' "$1"; }
# node_of / gpus_of ID: from the recorded decision
node_of() { comment "$1" | sed -n 's/.* node=\([^ ]*\).*/\1/p'; }
gpus_of() { comment "$1" | sed -n 's/.* gpus=\([^ ]*\).*/\1/p'; }
live_jobs() { squeue -h -o %i | wc -l; }
clear_jobs() {
  local ids; ids=$(squeue -h -o %i)
  [ -z "$ids" ] || scancel $ids 2>/dev/null || true
  local end=$(($(date +%s) + 60))
  until [ "$(live_jobs)" = 0 ]; do
    [ "$(date +%s)" -lt "$end" ] || die "jobs did not end: $(squeue -h)"
    sleep 0.2
  done
}
# expect ID NODE GPUS [MEM0 SM]: the job sees exactly its recorded decision
expect() {
  local id=$1 node=$2 gpus=$3 s
  s=$(seen "$id") || { bad "job $id started"; return; }
  local got="$(field "$s" NODE) $(field "$s" CVD)"
  local rec="$(node_of "$id") $(gpus_of "$id")"
  if [ "$got" = "$node $gpus" ] && [ "$rec" = "$node $gpus" ]; then
    ok "job $id ($4) sees NODE=$node CUDA_VISIBLE_DEVICES=$gpus, as recorded"
  else
    bad "job $id ($4): expected $node $gpus; job saw '$got', recorded '$rec'"
  fi
}
# capacity check from Slurm itself (independent of gpusched-slurm): per-card sums of the
# recorded decisions of live jobs within the inventory, and Slurm's GRES accounting agreeing
capacity_ok() {
  squeue --json >"$W/squeue.json"
  python3 - "$W/squeue.json" "$W/inventory" <<'PY'
import json, sys, os, collections
jobs = json.load(open(sys.argv[1]))["jobs"]
done = {"COMPLETED","CANCELLED","FAILED","TIMEOUT","NODE_FAIL","PREEMPTED","BOOT_FAIL","DEADLINE","OUT_OF_MEMORY"}
cards = {}
for f in os.listdir(sys.argv[2]):
    inv = json.load(open(os.path.join(sys.argv[2], f)))
    for c in inv["cards"]:
        cards[(inv["nodeName"], c["id"])] = (c.get("slots", 0), int(c.get("totalMemMib", 0)), c.get("totalCores", 0))
use = collections.defaultdict(lambda: [0, 0, 0])
gres = collections.defaultdict(lambda: [0, 0, 0])
for j in jobs:
    if j["job_state"] in done or not j.get("comment", "").startswith("gpusched/v1"):
        continue
    if j["comment"].split()[1:2] == ["preempted"]:
        # requeued by a preemption: holds nothing (and Slurm allocates nothing to it)
        if j["job_state"] == "RUNNING":
            print("preempted job", j["job_id"], "is running"); sys.exit(1)
        continue
    w = dict(x.split("=", 1) for x in j["comment"].split()[1:])
    for card in filter(None, w["devices"].rstrip(";").split(":")):
        uuid, _, mem, cores = card.split(",")
        u = use[(w["node"], uuid)]
        u[0] += 1; u[1] += int(mem); u[2] += int(cores)
    # Slurm's own view: the gres the job holds, and the node it runs on / is pinned to
    held = dict((g.split(":")[1], int(g.split(":")[2])) for g in j["tres_per_node"].split(",") if g.startswith("gres:"))
    if j["job_state"] == "RUNNING" and j["nodes"] != w["node"]:
        print("job", j["job_id"], "runs on", j["nodes"], "but was placed on", w["node"]); sys.exit(1)
    g = gres[w["node"]]
    g[0] += held.get("gpuslot", 0); g[1] += held.get("gpumem", 0); g[2] += held.get("gpucore", 0)
bad = 0
for k, (s, m, c) in use.items():
    if k not in cards:
        print("unknown card", k); bad = 1; continue
    S, M, C = cards[k]
    if s > S or m > M or c > C:
        print("over capacity", k, (s, m, c), "of", (S, M, C)); bad = 1
for node, g in gres.items():
    tot = [0, 0, 0]
    ncards = [0, 0, 0]
    for (n, _), (s, m, c) in use.items():
        if n == node:
            ncards[0] += s; ncards[1] += m; ncards[2] += c
    if g != ncards:
        print("slurm gres", node, g, "!= decisions", ncards); bad = 1
sys.exit(bad)
PY
}
no_new_job() { [ "$(live_jobs)" = "$1" ]; }

# --- 8. Scenarios ---------------------------------------------------------------------------
echo "e2e: story 1: node binpack (two 1-GPU jobs on two empty 4-GPU nodes -> both node1)"
sub s1a --gres=gpu:1 --gpusched hami.io/node-scheduler-policy=binpack; A=$JID
sub s1b --gres=gpu:1 --gpusched node-scheduler-policy=binpack; B=$JID
expect "$A" node1 "$(gpus_of "$A")" "pod1"
expect "$B" node1 "$(gpus_of "$B")" "pod2"
clear_jobs

echo "e2e: story 2: node spread (-> node1, then node2)"
sub s2a --gres=gpu:1 --gpusched node-scheduler-policy=spread; A=$JID
sub s2b --gres=gpu:1 --gpusched node-scheduler-policy=spread; B=$JID
expect "$A" node1 "$(gpus_of "$A")" "pod1"
expect "$B" node2 "$(gpus_of "$B")" "pod2"
clear_jobs

echo "e2e: story 3: GPU binpack, gpucores 20%, gpumem-percentage 20% on node1 (-> GPU1, GPU1)"
sub s3a -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem-percentage=20 --gpusched gpu-scheduler-policy=binpack; A=$JID
sub s3b -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem-percentage=20 --gpusched gpu-scheduler-policy=binpack; B=$JID
expect "$A" node1 0 "pod1"
expect "$B" node1 0 "pod2"
s=$(seen "$A")
check "story 3: HAMi-core limits in the job (MEM0=16384m SM=20): $(field "$s" MEM0) $(field "$s" SM)" \
  [ "$(field "$s" MEM0) $(field "$s" SM)" = "16384m 20" ]
clear_jobs

echo "e2e: story 4: GPU spread (-> GPU1, GPU2)"
sub s4a -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem-percentage=20 --gpusched gpu-scheduler-policy=spread; A=$JID
sub s4b -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem-percentage=20 --gpusched gpu-scheduler-policy=spread; B=$JID
expect "$A" node1 0 "pod1"
expect "$B" node1 1 "pod2"
clear_jobs

echo "e2e: design details: GPU1 used 10% cores + 2000 MiB, GPU2 70% + 6000 MiB; request 20% + 1000 MiB"
sub dd1 -p one --gres=gpu:1 --gpusched gpucores=10 --gpusched gpumem=2000 --gpusched use-gpuuuid=$U0
sub dd2 -p one --gres=gpu:1 --gpusched gpucores=70 --gpusched gpumem=6000 --gpusched use-gpuuuid=$U1
sub ddb -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem=1000 --gpusched use-gpuuuid=$U0,$U1 --gpusched gpu-scheduler-policy=binpack; A=$JID
expect "$A" node1 1 "binpack picks GPU2 (higher score)"
scancel "$A"; wait_for 30 "job $A gone" no_new_job 2
sub dds -p one --gres=gpu:1 --gpusched gpucores=20 --gpusched gpumem=1000 --gpusched use-gpuuuid=$U0,$U1 --gpusched gpu-scheduler-policy=spread; A=$JID
expect "$A" node1 0 "spread picks GPU1 (lower score)"
clear_jobs

echo "e2e: weights: GPU A (slot .2 core .9 mem .5) vs GPU B (slot .8 core .1 mem .6), binpack"
sub wa -p one --gres=gpu:1 --gpusched gpucores=90 --gpusched gpumem-percentage=10 --gpusched use-gpuuuid=$U0
sub wb -p one --gres=gpu:1 --gpusched gpucores=10 --gpusched gpumem-percentage=20 --gpusched use-gpuuuid=$U1
for i in 1 2 3 4 5 6; do
  sub "wb$i" -p one --gres=gpu:1 --gpusched gpucores=0 --gpusched gpumem=1 --gpusched use-gpuuuid=$U1
done
W_ARGS=(-p one --gres=gpu:1 --gpusched gpucores=0 --gpusched gpumem-percentage=40 --gpusched "use-gpuuuid=$U0,$U1" --gpusched gpu-scheduler-policy=binpack)
sub w111 "${W_ARGS[@]}"; A=$JID
expect "$A" node1 0 "default weights 1:1:1: A scores 16 > B 15"
scancel "$A"; wait_for 30 "job $A gone" no_new_job 8
sub w113 "${W_ARGS[@]}" --gpusched "hami.io/device-scoring-weights=slot=1,core=1,memory=3"; A=$JID
expect "$A" node1 1 "weights slot=1,core=1,memory=3: B scores 27 > A 26"
clear_jobs

echo "e2e: mutex: only an idle card; none idle -> refused"
for u in "$U0" "$U1" "$U2"; do sub mx -p one --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpucores=5 --gpusched "use-gpuuuid=$u"; done
sub mx1 -p one --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpu-scheduler-policy=mutex; A=$JID
expect "$A" node1 3 "mutex gets the only idle card GPU4"
sub mx2 -p one --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpu-scheduler-policy=mutex
check "mutex with no idle card: refused, exit 1, reason ExclusiveDeviceAllocateConflict" \
  bash -c "[ $RC = 1 ] && grep -q ExclusiveDeviceAllocateConflict '$W/out/mx2.err'"
check "mutex refusal: nothing queued" no_new_job 4
clear_jobs

echo "e2e: fgd (contract 12.7.5): GPU1 holds 60% (cores and memory), GPU2 50%; a job of 10%"
# Mix M2 of the contract: one card of 40% is what is expected to arrive.
cat >"$W/mix-m2.json" <<'JSON'
{"shapes": [{"probability": 1, "gpuCount": 1, "gpucoresPercent": 40, "gpumemPercent": 40}]}
JSON
chmod 644 "$W/mix-m2.json"
sub fa -p one --gres=gpu:1 --gpusched gpucores=60 --gpusched gpumem-percentage=60 --gpusched "use-gpuuuid=$U0"
sub fb -p one --gres=gpu:1 --gpusched gpucores=50 --gpusched gpumem-percentage=50 --gpusched "use-gpuuuid=$U1"
F_ARGS=(-p one --gres=gpu:1 --gpusched gpucores=10 --gpusched gpumem-percentage=10)
sub fbin "${F_ARGS[@]}" --gpusched gpu-scheduler-policy=binpack; A=$JID
expect "$A" node1 0 "binpack fills GPU1 to 70%: 30% nobody of the mix can use"
scancel "$A"; wait_for 30 "job $A gone" no_new_job 2
sub ffile "${F_ARGS[@]}" --gpusched gpu-scheduler-policy=fgd --gpusched-mix "$W/mix-m2.json"; A=$JID
expect "$A" node1 1 "fgd with the mix file (one card of 40%): GPU2, GPU1 keeps room for 40%"
scancel "$A"; wait_for 30 "job $A gone" no_new_job 2
# Observed mix: the jobs holding cards (60% and 50%, demand-weighted): GPU1's 40% free is
# already unusable for both; taking 10% of it lowers the fragmentation (GPU2 would lose its 50%).
sub fobs "${F_ARGS[@]}" --gpusched node-scheduler-policy=fgd --gpusched gpu-scheduler-policy=fgd; A=$JID
expect "$A" node1 0 "fgd with the mix observed from the booked jobs: GPU1"
scancel "$A"; wait_for 30 "job $A gone" no_new_job 2
sub fsvc "${F_ARGS[@]}" --gpusched gpu-scheduler-policy=fgd --gpusched-mix service
check "fgd with --gpusched-mix service and no policy.workload_mix on the server: refused (exit $RC) naming options.workload_mix, nothing queued" \
  bash -c "[ $RC = 2 ] && grep -q 'options.workload_mix' '$W/out/fsvc.err' && [ \"\$(squeue -h -o %i | wc -l)\" = 2 ]"
clear_jobs

echo "e2e: rejected submissions (nothing queued, message names the option)"
rejected() { # rejected NAME EXIT NEEDLE args...
  local name=$1 want=$2 needle=$3; shift 3
  sub "$name" "$@"
  if [ "$RC" = "$want" ] && grep -qF -- "$needle" "$W/out/$name.err" && [ "$(live_jobs)" = 0 ]; then
    ok "refused $name (exit $RC): $(head -1 "$W/out/$name.err")"
  else
    bad "$name: exit $RC, live jobs $(live_jobs), stderr: $(cat "$W/out/$name.err")"
  fi
}
rejected weights 2 "hami.io/device-scoring-weights" --gres=gpu:1 --gpusched "device-scoring-weights=slot=1,core=1"
rejected policy 2 "hami.io/gpu-scheduler-policy" --gres=gpu:1 --gpusched gpu-scheduler-policy=fastest
rejected nodepolicy 2 "hami.io/node-scheduler-policy" --gres=gpu:1 --gpusched node-scheduler-policy=random
rejected cores150 2 "nvidia.com/gpucores=150" --gres=gpu:1 --gpusched gpucores=150
rejected gputype 2 "nvidia.com/use-gputype=K80" --gres=gpu:1 --gpusched use-gputype=K80
rejected unknownkey 2 "--gpusched gpu-policy" --gres=gpu:1 --gpusched gpu-policy=spread
rejected nogpu 2 "--gres=gpu"
rejected comment 2 "--comment" --gres=gpu:1 --comment=mine
rejected toomany 1 "NodeInsufficientDevice" --gres=gpu:5
t0=$(date +%s.%N)
GPUSCHED_ADDRESS=http://127.0.0.1:$(free_port) sub down --gres=gpu:1 --gpusched-timeout 2
t1=$(date +%s.%N)
secs=$(python3 -c "print(round($t1-$t0,1))")
if [ "$RC" = 1 ] && grep -q "gpusched service at" "$W/out/down.err" && [ "$(live_jobs)" = 0 ] && python3 -c "import sys; sys.exit(0 if $secs < 15 else 1)"; then
  ok "service down: refused in ${secs}s, nothing queued: $(head -1 "$W/out/down.err")"
else
  bad "service down: exit $RC after ${secs}s: $(cat "$W/out/down.err")"
fi

echo "e2e: job_submit.lua: gpusched's GRES only with a decision; a user cannot change a decision"
lua_refuses_plain() {
  local out rc
  out=$(sbatch --parsable --gres=gpuslot:1 -o /dev/null --wrap true 2>&1) && rc=0 || rc=$?
  echo "$out" >"$W/out/lua-plain.err"
  [ "$rc" != 0 ] && [[ "$out" == *"booked by gpusched-sbatch only"* ]] && [ "$(live_jobs)" = 0 ]
}
check "lua: plain sbatch --gres=gpuslot:1 refused: $(lua_refuses_plain; head -1 "$W/out/lua-plain.err")" lua_refuses_plain
if ! id "$TEST_USER" >/dev/null 2>&1; then
  useradd -r -M -s /usr/sbin/nologin "$TEST_USER" && touch "$W/created-user"
fi
UJ=$(cd /tmp && runuser -u "$TEST_USER" -- env SLURM_CONF="$SLURM_CONF" GPUSCHED_ADDRESS="$ADDR" \
  GPUSCHED_INVENTORY_DIR="$W/inventory" "$BIN/gpusched-sbatch" --parsable --gpusched-lock none \
  --gres=gpu:1 --gpusched gpumem=1000 -o /dev/null --chdir=/tmp --wrap 'sleep 600' 2>"$W/out/user.err") || true
before=$( [ -n "$UJ" ] && comment "$UJ" || true)
lua_protects() {
  local out rc
  out=$(runuser -u "$TEST_USER" -- env SLURM_CONF="$SLURM_CONF" scontrol update jobid="$UJ" comment=forged 2>&1) && rc=0 || rc=$?
  echo "$out" >"$W/out/lua-modify.err"
  [ -n "$UJ" ] && [ "$rc" != 0 ] && [[ "$(comment "$UJ")" == gpusched/v1* ]] && [ "$(comment "$UJ")" = "$before" ]
}
check "lua: the job's owner cannot rewrite its decision (job ${UJ:-none}: $(lua_protects; head -1 "$W/out/lua-modify.err"))" lua_protects
clear_jobs

echo "e2e: baseline: plain sbatch submit-to-start (20 jobs)"
for i in $(seq 1 20); do
  t0=$(date +%s.%N)
  id=$(sbatch --parsable -J plain -o "$W/out/%j.out" --wrap "$JOB")
  t1=$(date +%s.%N)
  echo "$id $t0 $t1" >>"$W/lat/plain"
done
for id in $(awk '{print $1}' "$W/lat/plain"); do seen "$id" >/dev/null; done
clear_jobs
: >"$W/lat/gpusched"
echo "e2e: latency: 20 gpusched-sbatch jobs one after another"
for i in $(seq 1 20); do sub "lat$i" --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpucores=1; done
for id in $(awk '{print $1}' "$W/lat/gpusched"); do seen "$id" >/dev/null; done
latency() { # latency FILE: p50/p99 of wall time of the submit command and of submit-to-start
  python3 - "$1" "$W/out" <<'PY'
import sys, re
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
wall, start = [], []
for jid, t0, t1 in rows:
    m = re.search(r"START=([0-9.]+)", open(f"{sys.argv[2]}/{jid}.out").read())
    wall.append(float(t1) - float(t0)); start.append(float(m.group(1)) - float(t0))
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] * 1000
print(f"n={len(rows)} submit command p50={pct(wall,50):.0f}ms p99={pct(wall,99):.0f}ms; submit-to-start p50={pct(start,50):.0f}ms p99={pct(start,99):.0f}ms")
open(sys.argv[1] + ".sum", "w").write(f"{pct(wall,50)} {pct(wall,99)} {pct(start,50)} {pct(start,99)}\n")
PY
}
added() { # added by gpusched-sbatch over plain sbatch, from the .sum files
  python3 - "$W/lat/plain.sum" "$W/lat/gpusched.sum" <<'PY'
import sys
p = [float(x) for x in open(sys.argv[1]).read().split()]
g = [float(x) for x in open(sys.argv[2]).read().split()]
d = [b - a for a, b in zip(p, g)]
print(f"submit command p50 +{d[0]:.0f}ms p99 +{d[1]:.0f}ms; submit-to-start p50 {d[2]:+.0f}ms p99 {d[3]:+.0f}ms")
PY
}
LAT_PLAIN=$(latency "$W/lat/plain")
LAT_GS=$(latency "$W/lat/gpusched")
LAT_ADDED=$(added)
echo "e2e: latency plain sbatch:    $LAT_PLAIN"
echo "e2e: latency gpusched-sbatch: $LAT_GS"
grep -h '^gpusched: job' "$W"/out/lat*.err | head -3 | sed 's/^/e2e:   /'
check "latency: every gpusched job started" [ "$(wc -l <"$W/lat/gpusched")" = 20 ]
clear_jobs

echo "e2e: 40 jobs submitted at once (gpucores=25, gpumem=16384: 4 fit per card, 32 in all)"
: >"$W/lat/gpusched"
pids=()
for i in $(seq 1 40); do
  ( sub "c$i" --gres=gpu:1 --gpusched gpucores=25 --gpusched gpumem=16384; echo "$RC" >"$W/out/c$i.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
placed=$(cat "$W"/out/c*.rc | grep -c '^0$' || true)
refused=$(cat "$W"/out/c*.rc | grep -c '^1$' || true)
nofit=$(cat "$W"/out/c*.err | grep -c 'no node can take the job now' || true)
check "40 at once: 32 placed, 8 refused for capacity (placed $placed, refused $refused, no-fit messages $nofit)" \
  [ "$placed $refused $nofit" = "32 8 8" ]
check "40 at once: no card over its slots/memory/cores; Slurm's GRES equal gpusched's bookings" capacity_ok
for id in $(awk '{print $1}' "$W/lat/gpusched"); do
  s=$(seen "$id") || true
  [ "$(field "$s" NODE) $(field "$s" CVD)" = "$(node_of "$id") $(gpus_of "$id")" ] || echo "mismatch $id: $s" >>"$W/mismatch"
done
check "40 at once: each of the 32 jobs sees exactly its recorded node and GPU" [ ! -s "$W/mismatch" ]
LAT_40=$(latency "$W/lat/gpusched")
echo "e2e: latency 40 concurrent:   $LAT_40"

echo "e2e: slurmctld restarted mid-run: usage rebuilt from the jobs, nothing double-booked"
for id in $(awk 'NR<=8 {print $1}' "$W/lat/gpusched"); do scancel "$id"; done
wait_for 30 "8 jobs cancelled" no_new_job 24
kill "$(cat "$W/slurmctld.pid")"
wait_for 30 "slurmctld stopped" bash -c "! kill -0 $(cat "$W/slurmctld.pid") 2>/dev/null"
slurmctld -i -f "$SLURM_CONF"
wait_for 30 "slurmctld back" scontrol ping
wait_for 60 "nodes responding" bash -c '[ "$(sinfo -h -N -p gpu -o %t | grep -c -E "^(mix|alloc|idle)$")" = 2 ]'
check "restart: the 24 running jobs are still there" no_new_job 24
: >"$W/lat/gpusched"
pids=()
for i in $(seq 1 12); do
  ( sub "r$i" --gres=gpu:1 --gpusched gpucores=25 --gpusched gpumem=16384; echo "$RC" >"$W/out/r$i.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
placed=$(cat "$W"/out/r*.rc | grep -c '^0$' || true)
check "restart: 12 more at once -> exactly the 8 free places taken (placed $placed)" [ "$placed" = 8 ]
check "restart: no card over capacity; Slurm's GRES equal gpusched's bookings" capacity_ok
"$BIN/gpusched-slurm" usage --inventory "$W/inventory" >"$W/usage.txt"
check "restart: gpusched-slurm usage shows every card full (4 x 25% cores)" \
  [ "$(grep -c 'cores 100/100' "$W/usage.txt")" = 8 ]
clear_jobs

echo "e2e: 12 jobs at once WITHOUT the lock on node1 (16 places): the re-check alone prevents double booking"
pids=()
for i in $(seq 1 12); do
  ( sub "nl$i" -p one --gpusched-lock none --gres=gpu:1 --gpusched gpucores=25 --gpusched gpumem=16384
    echo "$RC" >"$W/out/nl$i.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
placed=$(cat "$W"/out/nl*.rc | grep -c '^0$' || true)
gaveup=$(cat "$W"/out/nl*.err | grep -c 'gave up after' || true)
retried=$(cat "$W"/out/nl*.err | grep -c 'attempt [2-9])' || true)
check "no lock: every job placed or gave up after retries (placed $placed, gave up $gaveup, placed after a lost race $retried)" \
  [ "$((placed + gaveup))" = 12 -a "$placed" -ge 1 ]
check "no lock: no card over capacity; Slurm's GRES equal gpusched's bookings" capacity_ok
check "no lock: cancelled race losers left nothing queued (live jobs = placed)" no_new_job "$placed"
clear_jobs

echo "e2e: preemption: partition highone (PriorityTier 10) over lowone (1), node1; 4 low jobs (50000 MiB, 60% cores) fill the 4 cards (80 GiB each)"
state_of() { squeue -h -j "$1" -o %T 2>/dev/null; }
for i in 0 1 2 3; do
  u=$(eval echo "\$U$i")
  sub "low$i" -p lowone --gres=gpu:1 --gpusched gpumem=50000 --gpusched gpucores=60 --gpusched "use-gpuuuid=$u"
  eval "L$i=$JID"
  seen "$JID" >/dev/null || true
  sleep 1.1 # distinct start seconds: of equal priority, the later started is the less important
done
# A high job asking 20000 MiB and 50% cores: no card has the cores free; of the four equal victims the
# service names the one started last (the others are put back first): L3 on GPU 3.
sub hi0 -p highone --gres=gpu:1 --gpusched gpumem=20000 --gpusched gpucores=50
refused_naming_victim() {
  [ "$RC" = 1 ] && grep -q "requeueing job(s) $L3 on node1 (GPU 3) would make room" "$W/out/hi0.err"
}
four_running() { [ "$(squeue -h -t RUNNING -o %i | wc -l)" = 4 ] && [ "$(live_jobs)" = 4 ]; }
check "preemption: without --gpusched-preempt, refused naming the job to requeue and its card ($(grep -o 'preemption: .*' "$W/out/hi0.err" | head -1))" \
  refused_naming_victim
check "preemption: nothing requeued, nothing queued" four_running
# Why the adapter cannot act for any user: Slurm lets only root and operators requeue others' jobs.
URC=0
(cd /tmp && runuser -u "$TEST_USER" -- env SLURM_CONF="$SLURM_CONF" GPUSCHED_ADDRESS="$ADDR" \
  GPUSCHED_INVENTORY_DIR="$W/inventory" "$BIN/gpusched-sbatch" --parsable --gpusched-lock none --gpusched-preempt \
  -p highone --gres=gpu:1 --gpusched gpumem=20000 --gpusched gpucores=50 -o /dev/null --chdir=/tmp --wrap 'sleep 600') \
  >/dev/null 2>"$W/out/user-preempt.err" || URC=$?
user_refused() {
  [ "$URC" = 1 ] && grep -q "preemption: requeueing job $L3" "$W/out/user-preempt.err" && four_running &&
    [ "$(state_of "$L3")" = RUNNING ]
}
check "preemption: a plain user's --gpusched-preempt is refused by Slurm, own job cancelled, victims untouched ($(grep -o 'preemption: requeueing.*' "$W/out/user-preempt.err" | head -1))" \
  user_refused
sub hi -p highone --gres=gpu:1 --gpusched gpumem=20000 --gpusched gpucores=50 --gpusched-preempt; H=$JID
expect "$H" node1 3 "preemption: the high job on the card its victim freed"
victim_requeued() {
  [ "$(state_of "$L3")" = PENDING ] && [[ "$(comment "$L3")" == "gpusched/v1 preempted by=$H "* ]]
}
check "preemption: exactly $L3 requeued and held, its comment '$(comment "$L3")'" victim_requeued
others_run() { [ "$(state_of "$L0") $(state_of "$L1") $(state_of "$L2")" = "RUNNING RUNNING RUNNING" ]; }
check "preemption: the other low jobs still run ($L0 $L1 $L2)" others_run
check "preemption: gpusched-sbatch reported it ($(grep -o 'preempted job.*' "$W/out/hi.err" | head -1))" \
  grep -q "preempted job(s) $L3: requeued and held" "$W/out/hi.err"
check "preemption: no card over capacity; Slurm's GRES equal gpusched's bookings" capacity_ok
clear_jobs

echo "e2e: GPU limits of accounts and QOS (slurmdbd on MariaDB; slurmctld restarted with accounting)"
# A private MariaDB for slurmdbd alone: no grant tables, on 127.0.0.1 and a socket in $W.
mkdir -p "$W/mysql" "$W/mysql-tmp"
chown mysql:mysql "$W/mysql" "$W/mysql-tmp"
TMPDIR=$W/mysql-tmp mariadb-install-db --user=mysql --datadir="$W/mysql" --skip-test-db \
  >"$W/mysql-install.log" 2>&1 || die "mariadb-install-db: $(grep -m3 ERROR "$W/mysql-install.log")"
DB_PORT=$(free_port)
DBD_PORT=$(free_port)
runuser -u mysql -- env TMPDIR="$W/mysql-tmp" mariadbd --datadir="$W/mysql" \
  --tmpdir="$W/mysql-tmp" --socket="$W/mysql/sock" --port="$DB_PORT" --bind-address=127.0.0.1 \
  --pid-file="$W/mysql/pid" --skip-grant-tables --log-error="$W/mysql.log" >/dev/null 2>&1 &
echo $! >"$W/mysql.pid"
wait_for 60 "MariaDB" test -S "$W/mysql/sock"
printf '%s\n' "AuthType=auth/munge" "AuthInfo=socket=$W/munge/socket" "DbdHost=localhost" \
  "DbdAddr=127.0.0.1" "DbdPort=$DBD_PORT" "SlurmUser=root" "PidFile=$W/slurmdbd.pid" \
  "LogFile=$W/slurmdbd.log" "StorageType=accounting_storage/mysql" "StorageHost=127.0.0.1" \
  "StoragePort=$DB_PORT" "StorageUser=root" "StorageLoc=slurm_acct_db" >"$W/slurmdbd.conf"
chmod 600 "$W/slurmdbd.conf"
slurmdbd # reads slurmdbd.conf from the folder of $SLURM_CONF
# AccountingStoragePass: the munge socket for slurmdbd connections.
sed -i -e "s#^AccountingStorageType=.*#AccountingStorageType=accounting_storage/slurmdbd#" \
  -e "/^AccountingStorageType=/a AccountingStorageHost=127.0.0.1\nAccountingStoragePort=$DBD_PORT\nAccountingStoragePass=$W/munge/socket\nAccountingStorageTRES=gres/gpuslot,gres/gpumem,gres/gpucore\nAccountingStorageEnforce=associations,limits,qos" \
  "$SLURM_CONF"
wait_for 60 "slurmdbd" sacctmgr -nP show cluster
sacctmgr -i add cluster gpusched-e2e >/dev/null
# slurmctld registers the TRES of AccountingStorageTRES when it starts with accounting.
kill "$(cat "$W/slurmctld.pid")"
wait_for 30 "slurmctld stopped" bash -c "! kill -0 $(cat "$W/slurmctld.pid") 2>/dev/null"
slurmctld -i -f "$SLURM_CONF"
wait_for 30 "slurmctld back" scontrol ping
wait_for 60 "nodes responding" bash -c '[ "$(sinfo -h -N -p gpu -o %t | grep -c -E "^(mix|alloc|idle)$")" = 2 ]'
wait_for 30 "TRES gres/gpumem registered" bash -c "sacctmgr -nP show tres | grep -q gres.gpumem"
sacctmgr -i add account team-q,team-r >/dev/null
sacctmgr -i add qos gpuq GrpTRES=gres/gpucore=60 >/dev/null
sacctmgr -i add user root account=team-q,team-r DefaultAccount=team-q >/dev/null
sacctmgr -i modify user where name=root set qos+=gpuq >/dev/null
sacctmgr -i modify account where name=team-q set GrpTRES=gres/gpumem=20000 >/dev/null
wait_for 30 "team-q's limit in slurmctld" bash -c \
  "scontrol show assoc_mgr accounts=team-q flags=assoc | grep -q 'gres/gpumem=20000'"
check "accounting: slurmctld keeps accounting in slurmdbd" \
  bash -c "scontrol show config | grep -q 'AccountingStorageType *= accounting_storage/slurmdbd'"
quota_refused() { # quota_refused NAME NEEDLE LIVE args...: exit 1 naming the limit, nothing queued
  local name=$1 needle=$2 live=$3; shift 3
  sub "$name" "$@"
  if [ "$RC" = 1 ] && grep -qF -- "$needle" "$W/out/$name.err" && [ "$(live_jobs)" = "$live" ]; then
    ok "refused $name (exit 1, nothing queued): $(head -1 "$W/out/$name.err")"
  else
    bad "$name: exit $RC, live jobs $(live_jobs) (want $live), stderr: $(cat "$W/out/$name.err")"
  fi
}
sub qa1 -A team-q --gres=gpu:1 --gpusched gpumem=8000; QA1=$JID; RC_QA1=$RC
sub qa2 -A team-q --gres=gpu:1 --gpusched gpumem=8000; RC_QA2=$RC
check "account limit: two jobs of 8000 MiB in team-q (GrpTRES gres/gpumem=20000) placed (exit $RC_QA1 $RC_QA2)" \
  [ "$RC_QA1 $RC_QA2" = "0 0" ]
quota_refused qa3 "ResourceQuotaNotFit" 2 -A team-q --gres=gpu:1 --gpusched gpumem=8000
check "account limit: the refusal names the limit ($(grep -o 'account team-q GrpTRES[^)]*' "$W/out/qa3.err"))" \
  grep -q "account team-q GrpTRES gres/gpumem=20000, 16000 held, 4000 left" "$W/out/qa3.err"
sub qd -A team-q --gres=gpu:1 --gpusched gpumem=4000; RC_QD=$RC
check "account limit: a job of the 4000 MiB left is placed (exit $RC_QD)" [ "$RC_QD" = 0 ]
for i in 1 2 3; do sub "qr$i" -A team-r --gres=gpu:1 --gpusched gpumem=8000; echo "$RC" >"$W/out/qr$i.rc"; done
check "another account (team-r, no limit) is not affected: 3/3 placed" \
  [ "$(cat "$W"/out/qr*.rc | tr -d '\n')" = 000 ]
for id in $(squeue -h -o %i); do seen "$id" >/dev/null || true; done
assoc_used() { scontrol show assoc_mgr accounts=team-q flags=assoc | grep -o 'gres/gpumem=20000([0-9]*)' | head -1; }
check "Slurm's accounting counts the same bookings: team-q $(assoc_used) (its running jobs' gres/gpumem)" \
  [ "$(assoc_used)" = "gres/gpumem=20000(20000)" ]
scancel "$QA1"
wait_for 30 "job $QA1 gone" no_new_job 5
sub qa4 -A team-q --gres=gpu:1 --gpusched gpumem=8000; RC_QA4=$RC
check "account limit: a cancelled job gives its share back (exit $RC_QA4)" [ "$RC_QA4" = 0 ]
clear_jobs
pids=()
for i in $(seq 1 6); do
  ( sub "qc$i" -A team-q --gres=gpu:1 --gpusched gpumem=8000; echo "$RC" >"$W/out/qc$i.rc" ) &
  pids+=($!)
done
wait "${pids[@]}"
placed=$(cat "$W"/out/qc*.rc | grep -c '^0$' || true)
check "account limit: 6 submissions of 8000 MiB at once into team-q -> exactly 2 placed (placed $placed)" \
  [ "$placed" = 2 ]
clear_jobs
for i in 1 2; do
  sub "qq$i" -A team-r --qos=gpuq --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpucores=25
  echo "$RC" >"$W/out/qq$i.rc"
done
check "QOS limit: two jobs of 25% cores in QOS gpuq (GrpTRES gres/gpucore=60) placed" \
  [ "$(cat "$W"/out/qq*.rc | tr -d '\n')" = 00 ]
quota_refused qq3 "QOS gpuq GrpTRES gres/gpucore=60, 50 held, 10 left" 2 \
  -A team-r --qos=gpuq --gres=gpu:1 --gpusched gpumem=1000 --gpusched gpucores=25
clear_jobs

T_END=$(date +%s)
echo "e2e: runtime $((T_END - T_START))s"
echo "e2e: latency plain sbatch:    $LAT_PLAIN"
echo "e2e: latency gpusched-sbatch: $LAT_GS"
echo "e2e: latency 40 concurrent:   $LAT_40"
echo "e2e: added by the adapter:    $LAT_ADDED"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
