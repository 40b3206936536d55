#!/usr/bin/env bash
# `fabric-preflight collective --mode nic-loopback|per-rail` on the one-GPU H200 machine (issue 32 §1-2), which
# has no RDMA NIC:
#   loopback-one-rank   the torch workload, one rank: NCCL selects Socket with no device; the NIC loopback must
#                       say there is no NIC to loop through and exit 1 with --expect gdrdma; NVLink-only SKIPs
#                       (one GPU, no pair).
#   loopback-two-ranks  two processes on the GPU with distinct NCCL_HOSTIDs, so that real NET channels are
#                       printed: NET/Socket, the same verdict with the channel count. Its NVLink-only run
#                       fails by construction (two "hosts" reach each other only through the network).
#   per-rail            the workload's --split-mod on real torch: two ranks (one host name), --rails 2, so one
#                       communicator per rank, each printed as its own `# Group g` table (--expect socket: the
#                       transport of this machine; no per_rail floor in the generic profile, so busbw WARNs).
# Usage: bench/collective-modes-h200.sh BIN OUTDIR. Writes OUTDIR/<step>/ (logs, JSON/JUnit reports, one
# directory per run of the mode) and OUTDIR/summary.txt (each step's exit code).
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2")
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
step() { # name args...: one collective run, its reports in OUTDIR/name, never stopping the session
  local name=$1; shift; local dir=$OUT/$name; local t0; t0=$(date +%s%N)
  echo "== $name" >&2
  "$BIN" collective --workload torch --log-dir "$dir" --color never --timeout 300 \
    --output "json=$dir/report.json" --output "junit=$dir/report.xml" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  printf '%-20s exit %-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$OUT/summary.txt" >&2
}
{ "$BIN" --version; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'; } > "$OUT/machine.txt" 2>&1
SIZES=(--workload-arg=--min-bytes=16M --workload-arg=--max-bytes=256M)
TWO=(--workload-arg=--nproc=2 --workload-arg=--distinct-hosts)
step loopback-one-rank --mode nic-loopback --expect gdrdma --workload-arg=--nproc=1 "${SIZES[@]}"
step loopback-two-ranks --mode nic-loopback --expect gdrdma "${TWO[@]}" "${SIZES[@]}"
step per-rail --mode per-rail --rails 2 --expect socket "${TWO[@]}" "${SIZES[@]}"
cat "$OUT/summary.txt"
