#!/usr/bin/env bash
# gds-read-stats.sh: on a GPU machine with libcufile, checks that gds.read reads cuFile's level-3 statistics with
# the layout of the library it loaded (issue 11 §4): the evidence names `cuFileGetVersion`, the statistics delta
# counts exactly the reads made (file size / the smaller of request and max_direct_io_size) and bytes read, every one on the path the summary names, no read
# error, and no "statistics unavailable" line. Also checks the free-space evidence path: the run was not refused
# for room. Exits 1 on a broken promise; prints the evidence either way.
#
#   bench/gds-read-stats.sh [--bin PATH] [--dir DIR] [-- RUN-ARGS…]
set -euo pipefail

BIN=./target/release/fabric-preflight
DIR=/var/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "$DIR/gds-stats.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$BIN" run --only gds.read --gds-dir "$WORK" --format json "$@" >"$WORK/report.json" || true

python3 - "$WORK/report.json" <<'EOF'
import json, re, sys
report = json.load(open(sys.argv[1]))
r = next(c for c in report["checks"] if c["id"] == "gds.read")
print(r["status"], r["summary"])
for line in r["evidence"]:
    print("  ", line)
ev = "\n".join(r["evidence"])
problems = []
version = re.search(r"cuFileGetVersion = (\d+)", ev)
if not version:
    problems.append("no cuFileGetVersion in the evidence")
stats = re.search(r"cuFileGetStatsL3 \(delta\) = reads (\d+) \(nvfs (\d+), p2p (\d+), posix (\d+)\), errors (\d+), (\d+) bytes", ev)
# cuFile splits each request into pieces of at most max_direct_io_size (seen on the H200: 64 MiB requests counted
# as 4 reads of 16 MiB each), so the count to expect is the file over the smaller of the two.
io_cap = re.search(r"max_direct_io_size (\d+) KiB", ev)
shape = re.search(r"test file = (\d+) MiB read in (\d+) KiB requests", ev)
if not stats:
    problems.append("no cuFile statistics delta (layout refused or unknown?)")
elif shape:
    total, nvfs, p2p, posix, errors, nbytes = map(int, stats.groups())
    piece_kib = min(int(shape.group(2)), int(io_cap.group(1))) if io_cap else int(shape.group(2))
    expected = int(shape.group(1)) * 1024 // piece_kib
    if nbytes != int(shape.group(1)) << 20:
        problems.append(f"statistics count {nbytes} bytes, {int(shape.group(1)) << 20} were read: wrong layout?")
    if total != expected:
        problems.append(f"statistics count {total} reads, {expected} were made: wrong layout?")
    if nvfs + p2p + posix != total:
        problems.append(f"path counters {nvfs}+{p2p}+{posix} do not add up to {total}")
    if errors:
        problems.append(f"{errors} read errors counted")
if "cuFile statistics = <" in ev:
    problems.append("statistics not read: " + ev.split("cuFile statistics = <", 1)[1].split(">", 1)[0])
if "safe margin" in r["summary"]:
    problems.append("refused for disk space: pick a --dir with room")
for p in problems:
    print("BROKEN:", p)
sys.exit(1 if problems else 0)
EOF
