#!/usr/bin/env bash
# pair-memory-live.sh: `pair --memory` on a machine with an NVIDIA GPU and no RDMA device (the H200 VM), two ends
# on loopback. Each end must name the GPU memory it would bring (a bus id the driver lists, from CUDA), and with
# no port to move it through every port-pair result must skip saying so: never a pass. Runs auto/auto,
# gpu/host and host/host; prints each end's memory line and pair.rdma verdict; exits 1 on a wrong verdict,
# 2 on a usage error.
#
#   bench/pair-memory-live.sh [--bin PATH] [--port N]
set -euo pipefail

BIN=./target/release/fabric-preflight
PORT=18515
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
bad=0
for modes in auto:auto gpu:host host:host; do
  listen=${modes%%:*} connect=${modes##*:}
  "$BIN" pair --listen "127.0.0.1:$PORT" --token t --timeout 30 --memory "$listen" --format json \
    >"$DIR/listen.json" 2>"$DIR/listen.err" &
  pid=$!
  sleep 0.5
  set +e
  "$BIN" pair --connect "127.0.0.1:$PORT" --token t --timeout 30 --memory "$connect" --format json \
    >"$DIR/connect.json" 2>"$DIR/connect.err"
  connect_code=$?
  wait "$pid"
  listen_code=$?
  set -e
  echo "== --memory $listen (listener, exit $listen_code) / --memory $connect (connector, exit $connect_code)"
  python3 - "$DIR/listen.json" "$listen" "$DIR/connect.json" "$connect" <<'PY' || bad=1
import json, os, sys
gpus = sorted(os.listdir("/proc/driver/nvidia/gpus")) if os.path.isdir("/proc/driver/nvidia/gpus") else []
bad = 0
for path, mode in [(sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])]:
    report = json.load(open(path))
    memory = [e for c in report["checks"] if c["id"] == "pair.handshake"
              for e in c["evidence"] if e.startswith("GPU memory here = ")]
    print(f"  --memory {mode}: {memory[0] if memory else '<no memory line>'}")
    for c in report["checks"]:
        if c["id"] == "pair.rdma":
            print(f"    {c['status'].upper():5} {c['summary']}")
            if c["status"] == "pass":
                bad = 1
            if mode != "host" and gpus and "not tested: no port to move it through" not in c["summary"]:
                bad = 1
    if mode != "host" and gpus and not any(g.lower() in memory[0] for g in gpus if memory):
        print(f"  expected one of {gpus} in the memory line")
        bad = 1
    if mode == "host" and (not memory or "--memory host" not in memory[0]):
        bad = 1
sys.exit(bad)
PY
done
exit $bad
