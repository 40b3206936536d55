#!/usr/bin/env bash
# Slurm, several nodes (issue 32): deploy/slurm/isolate.sbatch as shipped, parameterised only through its documented
# variables and sbatch's own options, through a real slurmctld and NODES (default 5) slurmd of Debian's slurm-wlm
# on this one machine. Each slurmd runs in a network + UTS + mount namespace of its own (hostname nI, address
# 10.77.0.I on a bridge, an /etc/hosts of the cluster bound over the real one); slurmctld runs in the root
# namespace at 10.77.0.254; one munged whose socket they share through the filesystem. Every node has one GPU GRES
# (a plain file stands for its device), so the script's --gpus-per-task=1 is scheduled as written.
# ALL_REDUCE_PERF is tests/standins/slurm/all_reduce_perf: each task reads its node from its own hostname, and a
# step holding the node named in the fault map falls back to NET/Socket (busbw below the profile's floor). The
# batch job (on n1) runs `isolate`, whose groups are real `srun --exact` steps.
# Asserts: with one bad node the job ends FAILED with exit 1, the report names exactly that node as culprit with
# evidence, each test was a step on exactly its nodes, scontrol shows the bad node, and only it, drained with the
# report in the reason, the others IDLE; with no bad node (after the node is resumed) the job exits 0 and drains
# nothing. Everything lives in a mktemp dir; the trap kills every daemon and what is left in the namespaces, and
# deletes the namespaces and the bridge. NODES=4..9, BAD_NODE=nI pick another fleet; KEEP=1 keeps the directory.
set -euo pipefail
stage_start=$SECONDS
cd "$(dirname "$0")/../.."
. .ci/lib.sh
apt_install slurmctld slurmd slurm-client munge iproute2 util-linux python3
cargo build -q --release --locked
bin="$PWD/target/release/fabric-preflight"
standin="$PWD/tests/standins/slurm/all_reduce_perf"
nodes=${NODES:-5}
bad=${BAD_NODE:-n4}
if [ "$nodes" -lt 4 ] || [ "$nodes" -gt 9 ]; then echo "FAIL: NODES must be 4..9, not $nodes" >&2; exit 1; fi
step() { echo "--- [$((SECONDS - stage_start)) s] $*"; }

# Names of our own (the pid in hex), so that a second run elsewhere on the machine keeps its own.
tag=$(printf '%x' $$)
bridge="fpb$tag"
ns() { echo "fp$tag-n$1"; }
subnet=10.77.0
if ip -4 route show | grep -q "^$subnet\.0/24"; then
  echo "FAIL: $subnet.0/24 is already routed here (another run?): $(ip -4 route show | grep "^$subnet\.0/24")" >&2
  exit 1
fi

work=$(mktemp -d /tmp/fabric-preflight-slurm-isolate.XXXXXX)
chmod 755 "$work"
cleanup() {
  local status=$? pidfile i pids log
  set +e
  if [ "$status" -ne 0 ]; then
    for log in "$work/slurmctld.log" "$work"/spool/*/slurmd.log "$work/munge/munged.log"; do
      [ -s "$log" ] && { echo "--- tail of $log" >&2; tail -n 15 "$log" >&2; }
    done
  fi
  for pidfile in "$work"/spool/*/slurmd.pid "$work/slurmctld.pid" "$work/munge/munged.pid"; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  # Whatever is left in a node's namespace (slurmstepd, a task of an interrupted step): ours, by its id.
  for i in $(seq 1 "$nodes"); do
    pids=$(ip netns pids "$(ns "$i")" 2>/dev/null)
    # shellcheck disable=SC2086 # one id per word
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
  done
  # A daemon that outlived its SIGTERM, if its command line still names our directory (not a reused id).
  for pidfile in "$work/slurmctld.pid" "$work/munge/munged.pid"; do
    [ -s "$pidfile" ] && grep -qF "$work" "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null &&
      kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
  for i in $(seq 1 "$nodes"); do
    ip netns del "$(ns "$i")" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then echo "KEEP=1: $work kept" >&2; else rm -rf "$work"; fi
  if [ "$status" -eq 0 ]; then
    echo "52-slurm-isolate: passed in $((SECONDS - stage_start)) s (cleaned up)"
  else
    echo "52-slurm-isolate: FAILED after $((SECONDS - stage_start)) s (cleaned up)" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

step "network: bridge $bridge at $subnet.254, $nodes namespaces n1..n$nodes"
ip link add "$bridge" type bridge
ip addr add "$subnet.254/24" dev "$bridge"
ip link set "$bridge" up
ctl=$(hostname -s)
{
  echo "127.0.0.1 localhost"
  echo "$subnet.254 $ctl"
} >"$work/hosts"
for i in $(seq 1 "$nodes"); do
  n=$(ns "$i")
  ip netns add "$n"
  ip link add "fp${tag}v$i" type veth peer name eth0 netns "$n"
  ip link set "fp${tag}v$i" master "$bridge" up
  ip -n "$n" addr add "$subnet.$i/24" dev eth0
  ip -n "$n" link set lo up
  ip -n "$n" link set eth0 up
  echo "$subnet.$i n$i" >>"$work/hosts"
done

step "munge: a key and a socket of our own"
dd if=/dev/urandom bs=1 count=1024 of="$work/munge.key" 2>/dev/null
chown munge:munge "$work/munge.key"
chmod 400 "$work/munge.key"
mkdir -p "$work/munge"
chown munge:munge "$work/munge"
socket="$work/munge/munge.socket"
su -s /bin/sh munge -c "munged --key-file=$work/munge.key --socket=$socket --pid-file=$work/munge/munged.pid \
  --log-file=$work/munge/munged.log --seed-file=$work/munge/seed"

step "slurm: slurmctld on $ctl ($subnet.254), slurmd n1..n$nodes in their namespaces"
mkdir -p "$work/state"
{
  cat <<CONF
ClusterName=fpisolate
SlurmctldHost=$ctl($subnet.254)
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16837
SlurmdPort=16838
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/spool/%n/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/spool/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=60
MinJobAge=600
CONF
  for i in $(seq 1 "$nodes"); do
    echo "NodeName=n$i NodeAddr=$subnet.$i CPUs=1 Gres=gpu:1 State=UNKNOWN"
  done
  echo "PartitionName=ci Nodes=n[1-$nodes] Default=YES State=UP MaxTime=INFINITE"
} >"$work/slurm.conf"
# One GPU per node, so that Slurm schedules the script's --gpus-per-task=1 as written. slurmd drops a GPU without
# File=, and takes a plain file for one (logging that it is not a device): nothing here binds or fences devices.
mkdir -p "$work/gpu"
: >"$work/gpu/nvidia0"
echo "NodeName=n[1-$nodes] Name=gpu File=$work/gpu/nvidia0" >"$work/gres.conf"
export SLURM_CONF="$work/slurm.conf"
slurmctld -c -f "$SLURM_CONF"
for i in $(seq 1 "$nodes"); do
  mkdir -p "$work/spool/n$i"
  # Not `ip netns exec`: it mounts a /sys of the namespace's own, without the cgroup filesystem slurmd wants.
  # The mount namespace is unshare's (private): the bind of hosts stays in there.
  nsenter --net="/run/netns/$(ns "$i")" unshare --uts --mount sh -c \
    "hostname n$i && mount --bind '$work/hosts' /etc/hosts && exec slurmd -f '$SLURM_CONF'"
done

nodes_line() { scontrol show node -o n"$1"; }
state_of() { nodes_line "$1" | sed -n 's/.* State=\([^ ]*\).*/\1/p'; }
# wait_idle SECS: until every node is IDLE (no DRAIN, nothing completing).
wait_idle() {
  local deadline=$((SECONDS + $1)) i ok
  while :; do
    ok=1
    for i in $(seq 1 "$nodes"); do [ "$(state_of "$i")" = IDLE ] || ok=0; done
    [ $ok = 1 ] && return 0
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: not every node IDLE within $1 s:" >&2
      sinfo -N -o '%N %T %E' >&2
      exit 1
    fi
    sleep 1
  done
}
wait_idle 60
sinfo -N -o '%N %T %G' | sed 's/^/    /'
# The namespaces are real: each slurmd saw its own hostname and runs a step where srun sends it.
# shellcheck disable=SC2016 # expanded by the task's shell, on its node
out=$(srun --nodes="$nodes" --ntasks-per-node=1 --gpus-per-task=1 --label sh -c 'echo "$(hostname) $SLURMD_NODENAME"' | sort)
echo "$out" | sed 's/^/    srun: /'
for i in $(seq 1 "$nodes"); do
  echo "$out" | grep -qx "$((i - 1)): n$i n$i" || { echo "FAIL: task $((i - 1)) did not run on n$i" >&2; exit 1; }
done

# submit OUT FAULTS: isolate.sbatch across every node, as its header documents, with the stand-in nccl-tests;
# waits for the job to end and sets $job and $job_line.
submit() {
  local deadline
  job=$(ISOLATE_FAULT_MAP="$2" ISOLATE_RENDEZVOUS="$work/rendezvous" FABRIC_PREFLIGHT="$bin" \
    ALL_REDUCE_PERF="$standin" GPUS_PER_NODE=1 PROFILE=hgx-h100-ib OUT="$1" \
    sbatch --parsable --chdir="$work" --output="$work/job-%j.out" --nodes="$nodes" --ntasks-per-node=1 \
    --time=00:10:00 deploy/slurm/isolate.sbatch)
  deadline=$((SECONDS + 120))
  while :; do
    job_line=$(scontrol show job -o "$job")
    case "$job_line" in
      *JobState=PENDING* | *JobState=RUNNING* | *JobState=CONFIGURING* | *JobState=COMPLETING*) ;;
      *) break ;;
    esac
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: job $job still not ended after 120 s: $job_line" >&2
      cat "$work/job-$job.out" >&2
      exit 1
    fi
    sleep 1
  done
  echo "    job $job: $(echo "$job_line" | grep -o 'JobState=[^ ]*') $(echo "$job_line" | grep -o 'ExitCode=[^ ]*')"
}
# check_report JSON CULPRIT: the report names exactly CULPRIT ("" for none) as culprit node, with evidence, and
# every other node healthy; prints each node's verdict. And each of its tests was a job step of $job whose tasks
# ran on exactly the test's nodes: the hostnames the stand-in's tasks read in their namespaces (rendezvous).
check_report() {
  python3 - "$1" "$2" "$nodes" "$work/rendezvous" "$job" <<'PY'
import json, os, sys
path, culprit, count, rendezvous, job = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
r = json.load(open(path))
tests = sorted(sorted(t["nodes"]) for rnd in r["rounds"] for t in rnd["tests"])
steps = []
for d in os.listdir(rendezvous):
    if d.startswith(job + "."):
        step = os.path.join(rendezvous, d)
        steps.append(sorted(open(os.path.join(step, f)).read().split()[1] for f in os.listdir(step)))
if sorted(steps) != tests:
    sys.exit(f"FAIL: the report's tests {tests} are not the job steps' hosts {sorted(steps)}")
print(f"    {len(steps)} job steps of job {job}, each on the nodes of its test (task hostnames)")
s = r["summary"]
want = [culprit] if culprit else []
fail = []
if s["culprit_nodes"] != want:
    fail.append(f"culprit_nodes {s['culprit_nodes']}, expected {want}")
if s["culprit_links"] or s["unconfirmed"] or s["untested"]:
    fail.append(f"links {s['culprit_links']} unconfirmed {s['unconfirmed']} untested {s['untested']}")
names = sorted(n["name"] for n in r["nodes"])
if names != sorted(f"n{i}" for i in range(1, count + 1)):
    fail.append(f"nodes {names}")
for n in r["nodes"]:
    ev = n["evidence"]
    print(f"    {n['name']}: {n['verdict']}: {n['reason']}")
    if n["name"] == culprit:
        failed = [e for e in ev if not e["passed"]]
        if n["verdict"] != "culprit_node" or not any(e["purpose"] == "confirm" for e in failed):
            fail.append(f"{culprit}: verdict {n['verdict']}, no failed confirmation in {ev}")
        for e in failed:
            print(f"      {e['test']} {e['purpose']}: busbw {e['busbw_gbytes_per_sec']} GB/s over {e['transport']}")
            if "socket" not in (e["transport"] or "").lower() or (e["busbw_gbytes_per_sec"] or 0) > 100:
                fail.append(f"{culprit}: evidence {e} is not the stand-in's Socket fallback")
    elif n["verdict"] != "healthy" or not any(e["passed"] for e in ev):
        fail.append(f"{n['name']}: verdict {n['verdict']}, evidence {ev}")
print(f"    {s['rounds']} rounds, {s['tests']} tests (job steps)")
if fail:
    sys.exit("FAIL: " + "; ".join(fail))
PY
}

step "run 1: fault map names $bad; sbatch --nodes=$nodes deploy/slurm/isolate.sbatch"
echo "$bad" >"$work/faults-$bad"
run1="$work/run1"
submit "$run1" "$work/faults-$bad"
case "$job_line" in
  *JobState=FAILED*ExitCode=1:0*) ;;
  *) echo "FAIL: job $job should end FAILED with exit 1: $job_line" >&2; cat "$work/job-$job.out" >&2; exit 1 ;;
esac
[ -s "$run1/isolate.json" ] || { echo "FAIL: no report at $run1/isolate.json" >&2; cat "$work/job-$job.out" >&2; exit 1; }
check_report "$run1/isolate.json" "$bad"
[ "$(cat "$run1/culprits.txt")" = "$bad" ] || { echo "FAIL: culprits.txt: $(cat "$run1/culprits.txt")" >&2; exit 1; }
reason="fabric-preflight isolate: culprit, see $run1/isolate.json"
for i in $(seq 1 "$nodes"); do
  line=$(nodes_line "$i")
  state=$(state_of "$i")
  if [ "n$i" = "$bad" ]; then
    case "$state" in *DRAIN*) ;; *) echo "FAIL: $bad not drained: $line" >&2; exit 1 ;; esac
    echo "$line" | grep -qF "Reason=$reason [" || { echo "FAIL: $bad's reason: $line" >&2; exit 1; }
    echo "    n$i: $state, $(echo "$line" | grep -o 'Reason=.*')"
  else
    [ "$state" = IDLE ] || { echo "FAIL: healthy n$i is $state: $line" >&2; exit 1; }
    echo "$line" | grep -q "Reason=" && { echo "FAIL: healthy n$i has a reason: $line" >&2; exit 1; }
    echo "    n$i: $state"
  fi
done

step "run 2: $bad resumed (repaired), empty fault map; the same sbatch"
scontrol update nodename="$bad" state=resume
wait_idle 30
: >"$work/faults-none"
run2="$work/run2"
submit "$run2" "$work/faults-none"
case "$job_line" in
  *JobState=COMPLETED*ExitCode=0:0*) ;;
  *) echo "FAIL: job $job should end COMPLETED with exit 0: $job_line" >&2; cat "$work/job-$job.out" >&2; exit 1 ;;
esac
check_report "$run2/isolate.json" ""
[ ! -s "$run2/culprits.txt" ] || { echo "FAIL: culprits.txt: $(cat "$run2/culprits.txt")" >&2; exit 1; }
wait_idle 30
echo "    every node IDLE, nothing drained: $(sinfo -h -N -o '%N=%T' | paste -sd' ' -)"
step "done"
