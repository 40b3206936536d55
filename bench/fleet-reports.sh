#!/usr/bin/env bash
# Records the fleet-facing outputs of fabric-preflight on a real machine, for checking here against the
# shipped schemas and promtool (the GPU machine has neither): --profile auto, the run report's new fields,
# Prometheus text written through the atomic --output path, JUnit named after the node, --quiet, the progress
# line on a terminal, completions, man page and --version.
# Usage: bench/fleet-reports.sh BIN OUTDIR   (reads the host only; writes OUTDIR)
# Then, here: for f in OUTDIR/*.prom; do promtool check metrics < "$f"; done, and validate OUTDIR/run-auto.json
# against schemas/run.schema.json (e.g. `check-jsonschema --schemafile schemas/run.schema.json OUTDIR/run-auto.json`).
set -u
BIN=$(readlink -f "$1"); OUT=$(readlink -f "$2"); mkdir -p "$OUT"
step() { echo "== $*" >&2; }

step "1. --profile auto: the pick and why (JSON, table, Prometheus, JUnit in one run)"
"$BIN" run --profile auto --color never --node-name "$(hostname -s)" --output json="$OUT/run-auto.json" \
  --output prometheus="$OUT/run-auto.prom" --output junit="$OUT/run-auto.junit.xml" > "$OUT/run-auto.txt" 2>&1
echo "exit $?" >> "$OUT/run-auto.txt"
ls -a "$OUT" > "$OUT/listing-after-atomic-writes.txt"   # no .*.tmp left

step "2. --strict and --quiet"
"$BIN" run --profile auto --strict --format json > "$OUT/run-auto-strict.json" 2>/dev/null; echo "exit $?" > "$OUT/run-auto-strict.exit"
"$BIN" run --profile auto --quiet --color never > "$OUT/run-auto-quiet.txt" 2>&1; echo "exit $?" >> "$OUT/run-auto-quiet.txt"

step "3. progress line on a terminal (script(1) gives stderr a pty)"
if command -v script >/dev/null; then
  script -qec "$BIN run --profile auto --format json --color never >/dev/null" /dev/null | cat -A > "$OUT/progress-on-tty.txt"
fi

step "4. views at 80 and 200 columns"
for cols in 80 200; do
  for view in "topo" "explain gds.read" "profiles"; do
    # shellcheck disable=SC2086
    COLUMNS=$cols "$BIN" $view > "$OUT/$(echo "$view" | tr ' ' '-')-$cols.txt" 2>&1
  done
done
"$BIN" topo --format json > "$OUT/topo.json" 2>&1

step "5. --version, completions, man"
"$BIN" --version > "$OUT/version.txt"
"$BIN" completions bash > "$OUT/completions.bash"
"$BIN" man > "$OUT/fabric-preflight.1"
if command -v promtool >/dev/null; then
  promtool check metrics < "$OUT/run-auto.prom" > "$OUT/promtool.txt" 2>&1; echo "exit $?" >> "$OUT/promtool.txt"
fi
