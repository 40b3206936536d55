#!/usr/bin/env bash
# gds-read.sh: gds.read measured against NVIDIA's own cuFile Python bindings (cuda.bindings.cufile) and plain
# POSIX reads, in the same run, on the same directory, with the same file and request sizes. A benchmark for a
# GPU machine, not a test.
#
#   bench/gds-read.sh [--bin PATH] [--dir DIR] [--size-mib N] [--block-kib N] [--runs N] [--warmup N]
#                     [--drop-caches]
#
# Each run: our `gds.read` (a fresh test file, written + fsync'ed, read with cuFile, then pread(O_DIRECT) into
# pinned memory + H2D copy), then the reference (the same steps in Python with torch buffers). Runs alternate
# so neither side always reads second. Reads use O_DIRECT: the guest page cache is bypassed; the disk's host
# side may still cache. --drop-caches writes 3 to /proc/sys/vm/drop_caches before every measurement (root).
# Prints the median of each column, the ratio of medians, and the median of the per-run ratios ours/reference
# (each pair runs back to back, so slow drift of the disk cancels); exits 1 when that paired ratio is more
# than 3% away from 1.
set -euo pipefail

BIN=./target/release/fabric-preflight
DIR=/var/tmp
SIZE_MIB=1024
BLOCK_KIB=65536
RUNS=3
WARMUP=1
DROP=0
PYTHON=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --size-mib) SIZE_MIB=$2; shift 2 ;;
    --block-kib) BLOCK_KIB=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --drop-caches) DROP=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "$DIR/gds-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PROFILE=$WORK/bench.yaml
cat > "$PROFILE" <<YAML
name: gds-bench
extends: generic
expect:
  gds_file_size_mib: $SIZE_MIB
  gds_block_size_kib: $BLOCK_KIB
YAML

drop() { if [ "$DROP" = 1 ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi; }

ours() {
  drop
  "$BIN" run --only gds.read --profile "$PROFILE" --gds-dir "$WORK" --format json --color never --timeout 300 \
    > "$WORK/ours.json" || true
  "$PYTHON" - "$WORK/ours.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = [c for c in r["checks"] if c["id"] == "gds.read"][0]
m = {x["name"]: x["value"] for x in c["measurements"]}
if "gds_read_gbytes_per_sec" not in m:
    print("ours-failed", c["status"], c["summary"], file=sys.stderr)
    sys.exit(1)
path = "compat" if "compat mode" in c["summary"] else ("nvidia-fs" if "nvidia-fs" in c["summary"] else "p2pdma" if "P2PDMA" in c["summary"] else "unknown")
print(m["gds_read_gbytes_per_sec"], m.get("posix_read_h2d_gbytes_per_sec", 0), path)
PY
}

reference() {
  drop
  CUFILE_LOGFILE_PATH=$WORK/ref-cufile.log "$PYTHON" - "$WORK" "$SIZE_MIB" "$BLOCK_KIB" <<'PY'
import os, sys, time
import torch
from cuda.bindings import cufile

work, size_mib, block_kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = block_kib * 1024
blocks = max(1, (size_mib * 1024 * 1024 + block - 1) // block)
path = os.path.join(work, "ref.bin")
buf = bytearray(block)
with open(path, "wb") as f:
    for i in range(blocks):
        f.write(buf)
    f.flush()
    os.fsync(f.fileno())
dev = torch.empty(block, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
cufile.driver_open()
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
descr = cufile.Descr()
descr.type = cufile.FileHandleType.OPAQUE_FD
descr.handle.fd = fd
descr.fs_ops = 0
fh = cufile.handle_register(descr.ptr)
cufile.buf_register(dev.data_ptr(), block, 0)
t = time.perf_counter()
for i in range(blocks):
    n = cufile.read(fh, dev.data_ptr(), block, i * block, 0)
    assert n == block, n
cufile_s = time.perf_counter() - t
cufile.buf_deregister(dev.data_ptr())
cufile.handle_deregister(fh)
cufile.driver_close()
host = torch.empty(block, dtype=torch.uint8, pin_memory=True)
view = memoryview(host.numpy())
t = time.perf_counter()
for i in range(blocks):
    assert os.preadv(fd, [view], i * block) == block
    dev.copy_(host)
    torch.cuda.synchronize()
posix_s = time.perf_counter() - t
os.close(fd)
os.unlink(path)
total = blocks * block
print(total / cufile_s / 1e9, total / posix_s / 1e9, "-")
PY
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: > "$WORK/ours.txt"; : > "$WORK/ref.txt"; : > "$WORK/pair.txt"
echo "gds-read bench: dir $DIR, file $SIZE_MIB MiB, requests $BLOCK_KIB KiB, $RUNS runs after $WARMUP warm-up, drop caches: $([ $DROP = 1 ] && echo yes || echo no)"
# Unrecorded warm-up pairs: the first CUDA/cuFile start and the first Python import are slower.
for i in $(seq 1 "$WARMUP"); do ours > /dev/null || true; reference > /dev/null || true; done
for i in $(seq 1 "$RUNS"); do
  # Alternate who goes first, so drift of the disk (host-side caching, writeback) does not favour one side.
  if [ $((i % 2)) = 1 ]; then o=$(ours); r=$(reference); else r=$(reference); o=$(ours); fi
  echo "run $i: ours cuFile/POSIX/path = $o | reference cuFile/POSIX = $r"
  echo "$o" >> "$WORK/ours.txt"; echo "$r" >> "$WORK/ref.txt"
  awk -v a="${o%% *}" -v b="${r%% *}" 'BEGIN {print a/b}' >> "$WORK/pair.txt"
done
oc=$(cut -d' ' -f1 "$WORK/ours.txt" | median); op=$(cut -d' ' -f2 "$WORK/ours.txt" | median)
rc=$(cut -d' ' -f1 "$WORK/ref.txt" | median); rp=$(cut -d' ' -f2 "$WORK/ref.txt" | median)
path=$(cut -d' ' -f3 "$WORK/ours.txt" | sort | uniq -c | sort -rn | awk 'NR==1{print $2}')
pair=$(median < "$WORK/pair.txt")
awk -v oc="$oc" -v op="$op" -v rc="$rc" -v rp="$rp" -v path="$path" -v pair="$pair" 'BEGIN {
  printf "\n%-34s %12s %12s %8s\n", "median of runs (GB/s)", "ours", "reference", "ratio"
  printf "%-34s %12.3f %12.3f %8.3f\n", "cuFile read (path: " path ")", oc, rc, oc/rc
  printf "%-34s %12.3f %12.3f %8.3f\n", "POSIX pread(O_DIRECT) + H2D", op, rp, op/rp
  printf "%-34s %12.3f %12.3f\n", "cuFile / POSIX", oc/op, rc/rp
  printf "%-34s %12s %12s %8.3f\n", "cuFile, median of per-run ratios", "", "", pair
  # Gate on the paired ratio: each pair ran back to back on the same disk state.
  d = (pair - 1) * 100
  printf "\ncuFile: ours vs reference %+.1f%% (median of paired runs) -> %s\n", d, (d <= 3 && d >= -3) ? "within 3%" : "OUTSIDE 3%"
  exit (d <= 3 && d >= -3) ? 0 : 1
}'
