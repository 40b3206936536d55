#!/usr/bin/env bash
# What a real GPU's NVML says about its health, beside nvidia-smi's view of the same counters, and what pcie.aer and
# pcie.link read there: for gpu.inventory's per-GPU judgement (remapped rows, retired pages, per-call errors) and
# for the AER files a VM's GPU exposes. Read-only. Usage: bench/nvml-gpu-health.sh BIN OUTDIR
# Writes OUTDIR/{nvidia-smi-*.txt,run.json,snapshot/,aer.txt} and OUTDIR/summary.txt.
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2")
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
step() { # name command...: keep its output and exit code, never stop
  local name=$1; shift
  "$@" > "$OUT/$name.txt" 2>&1; printf '%-24s exit %s\n' "$name" "$?" | tee -a "$OUT/summary.txt" >&2
}
step nvidia-smi-remap nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT,ECC
step nvidia-smi-pcie nvidia-smi -q -d PCIE
step nvidia-smi-fabric nvidia-smi -q -d FABRIC   # NVLink fabric state where the driver reports it
# The answers gpu.inventory judges (recorded into vendor-answers.json), and its verdicts with pcie.aer/pcie.link.
step snapshot "$BIN" snapshot "$OUT/snapshot"
"$BIN" run --profile auto --only gpu.inventory,pcie.aer,pcie.link --format json --color never > "$OUT/run.json" 2>"$OUT/run.err"
echo "run exit $?" >> "$OUT/summary.txt"
# Every AER file on the machine, as the kernel prints it (absent on kernels without CONFIG_PCIEAER).
step aer bash -c 'for f in /sys/bus/pci/devices/*/aer_dev_* /sys/bus/pci/devices/*/aer_rootport_total_err_*; do [ -e "$f" ] && { echo "== $f"; cat "$f"; }; done; grep -h CONFIG_PCIEAER /boot/config-$(uname -r) 2>/dev/null || zcat /proc/config.gz 2>/dev/null | grep CONFIG_PCIEAER'
