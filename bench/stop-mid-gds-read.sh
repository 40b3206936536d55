#!/usr/bin/env bash
# stop-mid-gds-read.sh: the "stops cleanly on SIGTERM/SIGINT" guarantee on a real GPU machine. Starts a live
# `run --only gds.read`, waits until its test file exists (the probe is writing or reading it through cuFile),
# sends the signal, and checks the promise: exit 3, gds.read an `error` "interrupted by SIG…" in the JSON report,
# the termination log says so, nothing left under --gds-dir, no probe child alive. Exits 1 on a broken promise.
#
#   bench/stop-mid-gds-read.sh [--bin PATH] [--dir DIR] [--signal TERM|INT] [--after SECS] [-- RUN-ARGS…]
# RUN-ARGS go to `run` as they are (a --profile, or a --root with stand-in libraries to try the script).
set -euo pipefail

BIN=./target/release/fabric-preflight
DIR=/var/tmp
SIGNAL=TERM
AFTER=0.3
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --signal) SIGNAL=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "$DIR/stop-gds.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/gds"
"$BIN" run --only gds.read --gds-dir "$WORK/gds" --format json --termination-log "$WORK/term" "$@" \
  >"$WORK/report.json" 2>"$WORK/stderr" &
pid=$!

file=
for _ in $(seq 600); do
  file=$(find "$WORK/gds" -type f -name gds-read.bin | head -1)
  [ -n "$file" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$file" ]; then
  echo "FAIL: gds.read never wrote its test file (no GPU/cuFile here?)"; cat "$WORK/stderr"
  kill "$pid" 2>/dev/null || true
  exit 1
fi
sleep "$AFTER"
children=$(pgrep -P "$pid" || true)
echo "test file $(stat -c %s "$file" 2>/dev/null || echo '?') bytes, probe children: ${children:-none}; sending SIG$SIGNAL"
started=$(date +%s.%N)
kill "-$SIGNAL" "$pid"
set +e
wait "$pid"
rc=$?
set -e
echo "stopped in $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }') s, exit $rc"

broken=0
[ "$rc" = 3 ] || { echo "FAIL: exit $rc, expected 3"; broken=1; }
python3 - "$WORK/report.json" "SIG$SIGNAL" <<'PY' || broken=1
import json, sys
report = json.load(open(sys.argv[1]))
gds = [c for c in report["checks"] if c["id"] == "gds.read"]
ok = report.get("interrupted") == sys.argv[2] and gds and all(
    c["status"] == "error" and "interrupted by " + sys.argv[2] in c["summary"] for c in gds)
print(("ok: " if ok else "FAIL: ") + json.dumps([(c["status"], c["summary"]) for c in gds]))
sys.exit(0 if ok else 1)
PY
grep -q "interrupted by SIG$SIGNAL" "$WORK/term" || { echo "FAIL: termination log: $(cat "$WORK/term")"; broken=1; }
left=$(find "$WORK/gds" -mindepth 1)
[ -z "$left" ] || { echo "FAIL: left under --gds-dir: $left"; broken=1; }
for child in $children; do
  if kill -0 "$child" 2>/dev/null; then echo "FAIL: probe child $child survived"; broken=1; fi
done
[ "$broken" = 0 ] && echo "PASS: exit 3, gds.read interrupted, no file and no child left"
exit "$broken"
