#!/usr/bin/env bash
# One batched session on a GPU machine: every recording and confirmation that needs the real machine, in one
# call (device time is scarce). Usage: bench/h200-session.sh BIN OUTDIR [NCCL_BENCH_BINARY]
# Writes OUTDIR/<step>/... and OUTDIR/summary.txt (each step's exit code and wall time). Changes nothing on the
# machine but /tmp, /var/tmp and, in record-machine.sh's last step, the udev record an SRE would create.
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2"); NCCL_BENCH=${3:-}
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
. bench/lib.sh
"$BIN" --version > "$OUT/version.txt" 2>&1
step record-machine bench/record-machine.sh "$BIN" "$OUT/record"
step presence-live bench/presence-live.sh --bin "$BIN"
# After record-machine's udev fix, so cuFile really reads: the statistics layout of the loaded libcufile.
step gds-read-stats bench/gds-read-stats.sh --bin "$BIN" --dir /var/tmp
step npd-line "$BIN" run --profile auto --format npd
if [ -x target/x86_64-unknown-linux-gnu/release/fabric-preflight ]; then
  step portable-live bench/portable-live.sh --profile hgx-h200-ib
fi
step fleet-reports bench/fleet-reports.sh "$BIN" "$OUT/fleet"
step loopbacks-generic "$BIN" run --only rdma.loopback,gdr.loopback --color never
step loopbacks-hgx-h200-ib "$BIN" run --profile hgx-h200-ib --only rdma.loopback,gdr.loopback --color never
step stop-mid-gds-read-term bench/stop-mid-gds-read.sh --bin "$BIN" --dir /var/tmp
step stop-mid-gds-read-int bench/stop-mid-gds-read.sh --bin "$BIN" --dir /var/tmp --signal INT
step gpu-copy bench/gpu-copy.sh "$BIN"
if "$BIN" pair --help >/dev/null 2>&1; then
  # Two ends on loopback: no RDMA device here, so the pair must say so (never pass without moving data).
  step pair-loopback bash -c "'$BIN' pair --listen 127.0.0.1:18515 --token t --format json --color never > '$OUT/pair-listen.json' 2>'$OUT/pair-listen.err' & sleep 0.3; '$BIN' pair --connect 127.0.0.1:18515 --token t --format json --color never; echo connect-exit=\$?; wait \$!; echo listen-exit=\$?"
fi
if "$BIN" pair --help 2>/dev/null | grep -q -- --memory; then
  # pair --memory with a real GPU and CUDA but no RDMA device: each end names its GPU, every pair skips.
  step pair-memory-live bench/pair-memory-live.sh --bin "$BIN" --port 18517
fi
if command -v strace >/dev/null; then
  # Each /sys and /proc file is read once per run (the parent process; probe children have their own host).
  step read-once bash -c "strace -e trace=openat -o '$OUT/openat.txt' '$BIN' run --format json >/dev/null; grep -oE '\"/(sys|proc)[^\"]+\"' '$OUT/openat.txt' | sort | uniq -c | awk '\$1>1' | tee '$OUT/read-twice.txt'; test ! -s '$OUT/read-twice.txt'"
fi
if [ -n "$NCCL_BENCH" ]; then
  step nccl-throughput env NCCL_BENCH_MB=512 taskset -c 2 "$NCCL_BENCH"
fi
cat "$OUT/summary.txt"
