#!/usr/bin/env bash
# One device call after merging issue 29-32's branches: the default and auto runs (no FAIL or ERROR this host did
# not have before), the NVLink-domain checks on real NVML (fabric info v4 where the driver has it), the aarch64-
# independent JSON report, and collective's --mode runs (bench/collective-modes-h200.sh).
# Usage: bench/merged-session.sh BIN OUTDIR. Writes OUTDIR/<step>.txt and OUTDIR/summary.txt.
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2")
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
. bench/lib.sh
{ "$BIN" --version; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,pci.bus_id --format=csv; } > "$OUT/machine.txt" 2>&1
step run-default "$BIN" run --color never
step run-auto-json "$BIN" run --profile auto --format json
step run-hgx-h200-ib "$BIN" run --profile hgx-h200-ib --color never
step nvlink-checks "$BIN" run --only gpu.nvlink,nvlink.imex,nvlink.link_quality --format json
step nvidia-smi-fabric nvidia-smi -q -d FABRIC
step collective-modes bench/collective-modes-h200.sh "$BIN" "$OUT/collective-modes"
