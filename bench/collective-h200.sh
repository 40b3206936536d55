#!/usr/bin/env bash
# `fabric-preflight collective` on the one-GPU H200 machine, in one batched call (issue 20 §4):
#   two-ranks  the torch workload as two processes on the one GPU, each with its own NCCL_HOSTID: NCCL takes
#              them for two hosts and uses its network transport, Socket there (no RDMA NIC). The tool must
#              say socket, fail --expect gdrdma (exit 1), show the busbw and the fix.
#   one-rank   one process: intra-node only, nothing to judge on the network.
#   timing     bench/collective_timing.py times the same all-reduce (same ranks, same size) with CUDA events,
#              just before and just after two-ranks; compare.txt holds the workload's busbw, both timings and
#              the difference to their mean (within 3% expected).
# Usage: bench/collective-h200.sh BIN OUTDIR. Writes OUTDIR/<step>/ (logs, reports) and OUTDIR/summary.txt.
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2")
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
SIZE=${SIZE:-256M}; ITERS=${ITERS:-30}
step() { # name command...: run it, keep its output and exit code, never stop the session
  local name=$1; shift; local t0; t0=$(date +%s%N)
  echo "== $name" >&2
  "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  printf '%-14s exit %-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$OUT/summary.txt" >&2
}
{ "$BIN" --version; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'; } > "$OUT/machine.txt" 2>&1
collective() { # dir args...: the workload with the report in every format people read
  local dir=$OUT/$1; shift
  "$BIN" collective --workload torch --log-dir "$dir" --color never \
    --output "json=$dir/report.json" --output "junit=$dir/report.xml" "$@"
}
step timing-before python3 bench/collective_timing.py --nproc 2 --distinct-hosts --bytes "$SIZE" --iters "$ITERS"
step two-ranks collective two-ranks --expect gdrdma --timeout 300 \
  --workload-arg=--nproc=2 --workload-arg=--distinct-hosts \
  --workload-arg=--min-bytes=16M --workload-arg=--max-bytes="$SIZE" --workload-arg=--iters="$ITERS"
step one-rank collective one-rank --expect gdrdma --timeout 300 \
  --workload-arg=--nproc=1 --workload-arg=--min-bytes=16M --workload-arg=--max-bytes="$SIZE"
step timing-after python3 bench/collective_timing.py --nproc 2 --distinct-hosts --bytes "$SIZE" --iters "$ITERS"
python3 - "$OUT" "$SIZE" > "$OUT/compare.txt" 2>&1 <<'PY'
import json, sys
out, size = sys.argv[1], sys.argv[2]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
nbytes = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
bench = [json.loads(open("%s/timing-%s.txt" % (out, w)).read().strip().splitlines()[-1])["busbw_gbytes_per_sec"] for w in ("before", "after")]
workload = None
for line in open(out + "/two-ranks/output.log"):
    f = line.split()
    if len(f) >= 9 and f[0] == str(nbytes) and not line.lstrip().startswith("#"):
        workload = float(f[-2])  # in-place busbw (the workload prints in-place only)
mean = sum(bench) / 2
diff = abs(workload - mean) / mean * 100
print("size %d B, 2 ranks on one H200 over NET/Socket" % nbytes)
print("workload (host clock around a synchronize): busbw %.3f GB/s" % workload)
print("bench/collective_timing.py (CUDA events):   busbw %.3f GB/s before, %.3f GB/s after" % tuple(bench))
print("difference to their mean %.2f%% -> %s" % (diff, "within 3%" if diff <= 3 else "NOT within 3%"))
PY
cat "$OUT/compare.txt" >&2
cat "$OUT/summary.txt"
