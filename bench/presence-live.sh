#!/usr/bin/env bash
# presence-live.sh: on a healthy GPU machine, the presence rule (src/rules/presence.rs) and the CUDA loader's entry-point
# fallback must change no verdict: every library check runs live and none reports a presence problem (hardware
# without its driver, a library that cannot be loaded, fails or lists nothing, no GPU exposed). Prints each
# result and the CUDA entry points the driver exports; exits 1 on a presence verdict, 2 on a usage error.
#
#   bench/presence-live.sh [--bin PATH] [-- RUN-ARGS…]
set -euo pipefail

BIN=./target/release/fabric-preflight
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

CHECKS=driver.nvidia,gpu.inventory,gpu.bar1,gpu.p2p,gpu.pcie,gpu.copy_bandwidth,gds.kernel_path,gds.read,rdma.loopback,gdr.loopback,rdma.devices,rdma.link
REPORT=$(mktemp)
trap 'rm -f "$REPORT"' EXIT
set +e
"$BIN" run --only "$CHECKS" --format json "$@" >"$REPORT"
code=$?
set -e
echo "exit code $code"
for sym in cuEventElapsedTime_v2 cuEventElapsedTime; do
  lib=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
  if [ -n "$lib" ] && nm -D --defined-only "$lib" 2>/dev/null | grep -qw "$sym"; then
    echo "libcuda exports $sym"
  fi
done
python3 - "$REPORT" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
presence = ("without the NVIDIA kernel driver", "without an RDMA driver", "cannot be loaded", ".so.1 failed:",
            ".so.0 failed:", "lists no device", "no GPU is exposed", "not run:")
bad = 0
for c in report["checks"]:
    line = f'{c["status"]:5} {c["id"]:20} {c.get("subject") or "-"}: {c["summary"]}'
    print(line)
    if any(p in c["summary"] for p in presence):
        bad += 1
        print("  ^ a presence verdict on a node that should have none")
sys.exit(1 if bad else 0)
PY
