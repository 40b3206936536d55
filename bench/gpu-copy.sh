#!/usr/bin/env bash
# Pinned host<->device copy bandwidth: fabric-preflight's gpu.copy_bandwidth against PyTorch, in the same run.
# A benchmark for a GPU machine, not a test. Usage: bench/gpu-copy.sh [path/to/fabric-preflight]
# Needs python3 with torch. Prints one row per GPU and direction: ours, PyTorch, ours/PyTorch.
# GB/s = 1e9 bytes/s. PyTorch: a 1 GiB pinned tensor, copy_ timed with CUDA events, 3 warm-ups, median of 20.
set -euo pipefail
BIN=${1:-fabric-preflight}
OURS=$(mktemp)
trap 'rm -f "$OURS"' EXIT
"$BIN" run --only gpu.copy_bandwidth --format json --color never > "$OURS" || true

python3 - "$OURS" <<'PY'
import json, statistics, sys
import torch

ours = {}
for c in json.load(open(sys.argv[1]))["checks"]:
    if c["id"] != "gpu.copy_bandwidth" or not c.get("subject") or "->" in c["subject"]:
        continue
    for m in c["measurements"]:
        ours[(c["subject"], m["name"].split("_")[0])] = m["value"]

def bus_id(i):
    p = torch.cuda.get_device_properties(i)
    return f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"

SIZE, WARMUP, REPS = 1 << 30, 3, 20
print(f"{'GPU':14} {'dir':4} {'fabric-preflight':>17} {'PyTorch':>9} {'ratio':>7}")
for i in range(torch.cuda.device_count()):
    torch.cuda.set_device(i)
    host = torch.empty(SIZE, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{i}")
    for direction, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        times = []
        for r in range(WARMUP + REPS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            if r >= WARMUP:
                times.append(start.elapsed_time(end))
        torch_gbs = SIZE / (statistics.median(times) / 1000) / 1e9
        ours_gbs = ours.get((bus_id(i), direction))
        ratio = f"{ours_gbs / torch_gbs:7.3f}" if ours_gbs else "    n/a"
        shown = f"{ours_gbs:17.2f}" if ours_gbs else f"{'n/a':>17}"
        print(f"{bus_id(i):14} {direction.upper():4} {shown} {torch_gbs:9.2f} {ratio}")
    del host, dev
PY
