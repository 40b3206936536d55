#!/usr/bin/env bash
# Slurm: deploy/slurm/fabric-preflight-healthcheck as the HealthCheckProgram of a real slurmctld + slurmd (Debian's
# slurm-wlm) on loopback. The good tree is a real H200 recording with its library answers (the same verdict on any
# machine); the bad one has an InfiniBand port down. A bad tree must drain the node with the first failing check as
# the reason, a good one must leave it idle, a drain set by someone else must survive, and each run must stay well
# inside 60 s. Then the same script as a Prolog: a good tree lets a job run, a bad one drains the node, job held.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
apt_install slurmctld slurmd slurm-client munge
cargo build -q --release --locked
bin="$PWD/target/release/fabric-preflight"

work=$(mktemp -d /tmp/fabric-preflight-slurm.XXXXXX)
chmod 755 "$work"
node=$(hostname -s)
cleanup() {
  local pidfile
  for pidfile in "$work"/slurmd.pid "$work"/slurmctld.pid "$work"/munge/munged.pid; do
    if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT

# munge: a key of our own, a socket of our own, so a munged already running elsewhere is left alone.
dd if=/dev/urandom bs=1 count=1024 of="$work/munge.key" 2>/dev/null
chown munge:munge "$work/munge.key"; chmod 400 "$work/munge.key"
mkdir -p "$work/munge"; chown munge:munge "$work/munge"
socket="$work/munge/munge.socket"
sudo_munge() { su -s /bin/sh munge -c "$*"; }
sudo_munge "munged --key-file=$work/munge.key --socket=$socket --pid-file=$work/munge/munged.pid \
  --log-file=$work/munge/munged.log --seed-file=$work/munge/seed"
# slurmctld and slurmd find munge's socket through the auth plugin's setting.
cat > "$work/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$node(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
ReturnToService=2
HealthCheckProgram=$work/healthcheck
HealthCheckInterval=5
HealthCheckNodeState=ANY
NodeName=$node NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES State=UP
CONF
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF="$work/slurm.conf"
# slurmd passes the program no environment: everything it needs comes from its defaults file, here not in /etc.
defaults="$work/healthcheck.defaults"
printf '#!/bin/sh\nFABRIC_PREFLIGHT_DEFAULTS=%s exec %s\n' "$defaults" "$PWD/deploy/slurm/fabric-preflight-healthcheck" \
  > "$work/healthcheck"
chmod 755 "$work/healthcheck"
use_tree() {
  cat > "$defaults" <<DEF
FABRIC_PREFLIGHT=${2:-$bin}
FABRIC_PREFLIGHT_SECS=${3:-40}
FABRIC_PREFLIGHT_ARGS="--root $PWD/testdata/hosts/$1 --profile generic"
SLURM_CONF=$work/slurm.conf
NODE=$node
DEF
}
use_tree h200-vm-snapshot
slurmctld -c -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

node_line() { scontrol show node -o "$node"; }
# wait_for TEXT SECS: until `scontrol show node` shows TEXT.
wait_for() {
  local deadline=$((SECONDS + $2))
  until node_line | grep -qF -- "$1"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "FAIL: node never showed '$1' within $2 s; now: $(node_line)" >&2
      tail -n 20 "$work/slurmd.log" "$work/slurmctld.log" >&2
      exit 1
    fi
    sleep 1
  done
}
wait_for "State=IDLE" 60
echo "slurmctld + slurmd up; node $node idle"

# The program's own run time, as slurmd would see it (slurmd kills it at 60 s).
start=$(date +%s%N)
env -i PATH="$PATH" "$work/healthcheck"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "healthy run took ${elapsed_ms} ms"
[ "$elapsed_ms" -lt 30000 ] || { echo "FAIL: health check took ${elapsed_ms} ms" >&2; exit 1; }

# A bad tree: slurmd's next health check drains the node, naming the first failing check.
use_tree ib-port-down
expected="fabric-preflight: $("$bin" run --format npd --root "$PWD/testdata/hosts/ib-port-down" --profile generic || true)"
wait_for "Reason=$expected" 30
node_line | grep -q "State=IDLE+DRAIN" || { echo "FAIL: not drained: $(node_line)" >&2; exit 1; }
echo "bad tree drained the node: $(sinfo -R -h -o '%E' -n "$node")"
grep -q "health_check failed: rc:1" "$work/slurmd.log" || { echo "FAIL: slurmd never ran the check" >&2; exit 1; }

# Back to a good tree: the node resumes, because the drain was ours.
use_tree h200-vm-snapshot
wait_for "State=IDLE " 30
node_line | grep -q "Reason=" && { echo "FAIL: reason left behind: $(node_line)" >&2; exit 1; }
echo "good tree resumed the node it had drained"

# A binary that hangs: the script still ends within its bound (deadline + 5 s guard + 2 s kill) and drains.
printf '#!/bin/sh\nexec sleep 600\n' > "$work/hang"; chmod 755 "$work/hang"
use_tree h200-vm-snapshot "$work/hang" 3
start=$SECONDS
env -i PATH="$PATH" "$work/healthcheck" 2>/dev/null && { echo "FAIL: a hung run passed" >&2; exit 1; }
echo "hung binary: the health check gave up after $((SECONDS - start)) s (bound 10 s)"
[ $((SECONDS - start)) -le 12 ] || { echo "FAIL: the health check overran its bound" >&2; exit 1; }
wait_for "Reason=fabric-preflight: timed out after 8 s" 5
use_tree h200-vm-snapshot
wait_for "State=IDLE " 30

# Someone else's drain stays, through a bad tree and a good one.
scontrol update nodename="$node" state=drain reason="admin: swap HCA"
use_tree ib-port-down
sleep 7
use_tree h200-vm-snapshot
sleep 7
node_line | grep -qF "Reason=admin: swap HCA" || { echo "FAIL: foreign drain changed: $(node_line)" >&2; exit 1; }
node_line | grep -q "DRAIN" || { echo "FAIL: foreign drain lifted: $(node_line)" >&2; exit 1; }
echo "a drain set by someone else was neither overwritten nor lifted"

# As a Prolog: health checks off, the same script runs before each job on the node.
scontrol update nodename="$node" state=resume
sed -i '/^HealthCheck/d' "$SLURM_CONF"
printf 'Prolog=%s\nPrologFlags=Alloc\n' "$work/healthcheck" >> "$SLURM_CONF"
scontrol reconfigure
use_tree h200-vm-snapshot
wait_for "State=IDLE " 30
job_state() { scontrol show job -o "$1" | sed -n 's/.*JobState=\([^ ]*\).*/\1/p'; }
job=$(sbatch --parsable -o /dev/null --wrap true)
deadline=$((SECONDS + 30))
until [ "$(job_state "$job")" = COMPLETED ]; do
  [ $SECONDS -lt $deadline ] || { echo "FAIL: job $job on a good node: $(scontrol show job -o "$job")" >&2; exit 1; }
  sleep 1
done
echo "Prolog on a good tree: job $job ran"
use_tree ib-port-down
job=$(sbatch --parsable -o /dev/null --wrap true)
wait_for "Reason=$expected" 30
deadline=$((SECONDS + 15))
until scontrol show job -o "$job" | grep -q "JobState=PENDING Reason=launch_failed_requeued_held"; do
  [ $SECONDS -lt $deadline ] || { echo "FAIL: job $job not held: $(scontrol show job -o "$job")" >&2; exit 1; }
  sleep 1
done
echo "Prolog on a bad tree: node drained with the same reason, job $job requeued and held"
