#!/usr/bin/env bash
# Facts once per run, on a GPU machine (issue 18, "Measured, not claimed"): in one call,
#   1. which processes of one `run` open NVML (glibc's LD_DEBUG=files, one file per process), for the NVML checks
#      alone and for the default set;
#   2. the static set's time against `nvidia-smi -q`, alternating, in the same run (and the static + library set);
#   3. gpu.copy_bandwidth against PyTorch (bench/gpu-copy.sh) and gds.read against cuda.bindings.cufile
#      (bench/gds-read.sh), each with its 3% bound.
# Usage: bench/facts-session.sh BIN OUTDIR. Changes nothing on the machine but /tmp, /var/tmp and the udev record
# bench/record-machine.sh also creates (so cuFile reads on a host without a udev daemon).
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2")
mkdir -p "$OUT"; cd "$(dirname "$0")/.."
step() { # name command...: run it, keep its output and exit code, never stop the session
  local name=$1; shift; local t0; t0=$(date +%s%N)
  "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  printf '%-28s exit %-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$OUT/summary.txt" >&2
}
"$BIN" --version > "$OUT/version.txt" 2>&1

# The static checks of this version (`list` marks them "static"), and the NVML checks that judge gathered facts.
STATIC=driver.nvidia,gdr.kernel_path,gds.kernel_path,gds.config,rdma.memlock,rdma.devices,rdma.link,rdma.roce,rdma.counters,pcie.link,pcie.acs,pcie.iommu,topo.gpu_nic,nccl.transport,nccl.env
LIBRARY=$STATIC,gpu.inventory,gpu.bar1,gpu.p2p
echo "static: $STATIC" > "$OUT/sets.txt"; echo "static+library: $LIBRARY" >> "$OUT/sets.txt"

# 1. Who opens NVML: one LD_DEBUG file per process; a process that loaded libnvidia-ml says so in its own file.
nvml_openers() { # label args...
  local label=$1; shift; local dir; dir=$(mktemp -d)
  LD_DEBUG=files LD_DEBUG_OUTPUT="$dir/ld" "$BIN" "$@" --format json > "$OUT/$label.json" 2>/dev/null
  echo "$label: $(ls "$dir" | wc -l) processes; opened libnvidia-ml: $(grep -l 'file=libnvidia-ml' "$dir"/* 2>/dev/null | wc -l)"
  for f in "$dir"/*; do printf '  %s: %s\n' "$(basename "$f")" "$(grep -m1 -o 'file=libnvidia-ml[^ ]*' "$f" || echo -)"; done
  rm -rf "$dir"
}
step nvml-openers bash -c "$(declare -f nvml_openers); BIN='$BIN' OUT='$OUT'; nvml_openers nvml-checks run --only gpu.inventory,gpu.bar1,gpu.p2p; nvml_openers default-run run"

# 2. The static set (and static + library set) against nvidia-smi -q, alternating, 15 rounds, medians in ms.
step static-vs-nvidia-smi python3 - "$BIN" "$STATIC" "$LIBRARY" <<'PY'
import statistics, subprocess, sys, time
bin_, static, library = sys.argv[1:4]
cmds = {
    "static set": [bin_, "run", "--only", static, "--format", "json"],
    "static+library set": [bin_, "run", "--only", library, "--format", "json"],
    "nvidia-smi -q": ["nvidia-smi", "-q"],
}
times = {k: [] for k in cmds}
for r in range(16):
    for k, c in cmds.items():
        t = time.perf_counter()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r:  # the first round warms the page cache
            times[k].append((time.perf_counter() - t) * 1e3)
ref = statistics.median(times["nvidia-smi -q"])
for k, v in times.items():
    m = statistics.median(v)
    print(f"{k:22} median {m:8.1f} ms  min {min(v):8.1f} ms  /nvidia-smi -q {m / ref:5.2f}")
PY

# 3. The paired benches (each exits 1 beyond its 3% bound).
dev=$(findmnt -no MAJ:MIN -T /var/tmp | tr -d ' ')
[ -e "/run/udev/data/b$dev" ] || { mkdir -p /run/udev/data && printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "$(findmnt -no FSTYPE -T /var/tmp)" > "/run/udev/data/b$dev"; }
step gpu-copy bench/gpu-copy.sh "$BIN"
step gds-read bench/gds-read.sh --bin "$BIN" --dir /var/tmp
cat "$OUT/summary.txt"
