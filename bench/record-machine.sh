#!/usr/bin/env bash
# Records what fabric-preflight reports on a real GPU machine, as test fixtures and evidence for testdata/.
# Usage: bench/record-machine.sh BIN OUTDIR   (run as root on the machine; changes nothing but /tmp, except
# step 5, which applies the udev fix an SRE would apply on a host without a udev daemon — see README).
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2"); mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step() { echo "== $*" >&2; }

step "1. full run, generic profile (table, JSON, JUnit, Prometheus, termination log)"
t0=$(date +%s%N)
"$BIN" run --color never --output json="$OUT/run-generic.json" --output junit="$OUT/run-generic.junit.xml" \
  --output prometheus="$OUT/run-generic.prom" --termination-log "$OUT/termination-log.txt" > "$OUT/run-generic.txt" 2>&1
rc=$?; echo "exit $rc wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$OUT/run-generic.txt"

step "2. hgx-h200-ib profile (what an 8-GPU IB node type says of this VM)"
"$BIN" run --profile hgx-h200-ib --format json > "$OUT/run-hgx-h200-ib.json" 2>/dev/null; echo "exit $?" > "$OUT/run-hgx-h200-ib.exit"

step "3. topo"
"$BIN" topo > "$OUT/topo.txt" 2>&1; "$BIN" topo --format json > "$OUT/topo.json" 2>&1

step "4. a real NCCL run (one rank: the only shape one GPU allows) and its analysis"
cat > /tmp/nccl1.py <<'PY'
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29531")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
t = torch.ones(1 << 20, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
print("all_reduce ok", t[0].item()); dist.destroy_process_group()
PY
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV python3 /tmp/nccl1.py > "$OUT/nccl-h200-1rank.log" 2>&1
"$BIN" nccl "$OUT/nccl-h200-1rank.log" --format json > "$OUT/nccl-h200-1rank.json"; echo "exit $?" >> "$OUT/nccl-h200-1rank.json.exit"
"$BIN" nccl "$OUT/nccl-h200-1rank.log" > "$OUT/nccl-h200-1rank.txt"; echo "exit $?" >> "$OUT/nccl-h200-1rank.txt"
"$BIN" run --only nccl.transport,nccl.env --nccl-log "$OUT/nccl-h200-1rank.log" --color never > "$OUT/run-nccl.txt" 2>&1; echo "exit $?" >> "$OUT/run-nccl.txt"

step "5. snapshot of the whole machine (replayed in CI)"
"$BIN" snapshot "$OUT/snapshot" > "$OUT/snapshot.txt" 2>&1; echo "exit $?" >> "$OUT/snapshot.txt"

step "6. gds after the SRE's udev fix (compat mode measured)"
dev=$(findmnt -no MAJ:MIN -T /tmp | tr -d ' ')
[ -e "/run/udev/data/b$dev" ] || { mkdir -p /run/udev/data && printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "$(findmnt -no FSTYPE -T /tmp)" > "/run/udev/data/b$dev"; }
"$BIN" run --only gds.config,gds.read --color never > "$OUT/run-gds-after-udev-fix.txt" 2>&1; echo "exit $?" >> "$OUT/run-gds-after-udev-fix.txt"
