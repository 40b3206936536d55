#!/usr/bin/env bash
# What one `__pair` child process costs: fork + exec of the binary, reading the job on stdin, the reply on
# stdout. The job is the cheapest real one (list the ports of a recorded tree, host memory: no CUDA), so the
# figure is the floor every port pair and the listing pay. Side by side: /bin/true (fork + exec alone) and
# `fabric-preflight --version` (the binary's own start). hyperfine where installed, else a timed loop.
# Usage: bench/pair-child-cost.sh [BIN] [RUNS]   (default target/release/fabric-preflight, 200)
set -eu
cd "$(dirname "$0")/.."
BIN=$(readlink -f "${1:-target/release/fabric-preflight}"); RUNS=${2:-200}
JOB='{"Inventory":{"root":"testdata/hosts/hgx-healthy","memory":"host"}}'
echo "$JOB" | "$BIN" __pair 2>/dev/null | grep -q '"ports"' || { echo "no reply from $BIN __pair" >&2; exit 1; }
if command -v hyperfine >/dev/null; then
  exec hyperfine -N --warmup 20 --runs "$RUNS" --input <(echo "$JOB") \
    "/bin/true" "$BIN --version" "$BIN __pair"
fi
per_run() { # label, command...
  local label=$1; shift
  local t0 t1; t0=$(date +%s%N)
  for _ in $(seq "$RUNS"); do echo "$JOB" | "$@" >/dev/null 2>&1; done
  t1=$(date +%s%N)
  printf '%-28s %8.2f ms per run (%s runs, through a shell pipe)\n' "$label" "$(( (t1 - t0) / RUNS ))e-6" "$RUNS"
}
per_run "/bin/true" /bin/true
per_run "fabric-preflight --version" "$BIN" --version
per_run "fabric-preflight __pair" "$BIN" __pair
