#!/usr/bin/env bash
# Prometheus, against the real components (Debian's promtool and node_exporter):
#  1. `promtool check metrics` is clean on the `--format prometheus` output of every recorded tree, under the
#     generic profile and under --profile auto;
#  2. node_exporter's textfile collector, on 127.0.0.1, serves each tree's file written with --output (the
#     atomic temp-file-and-rename path): no `node_textfile_scrape_error`, every fabric_preflight sample there;
#  3. scrapes that overlap a burst of rewrites never see a half-written file.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() {
  echo "60-prometheus: FAIL: $*" >&2
  exit 1
}

if ! command -v promtool >/dev/null || ! command -v prometheus-node-exporter >/dev/null \
  || ! command -v curl >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter curl >/dev/null
fi
echo "promtool: $(promtool --version 2>&1 | head -1)"
echo "node_exporter: $(prometheus-node-exporter --version 2>&1 | head -1)"

bin=target/release/fabric-preflight
[ -x "$bin" ] || cargo build --release --locked
work=$(mktemp -d)
exporter_pid=
cleanup() {
  [ -n "$exporter_pid" ] && kill "$exporter_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# 1. promtool on every tree and profile.
linted=0
for tree in testdata/hosts/*/; do
  for profile in generic auto; do
    out="$work/$(basename "$tree")-$profile.prom"
    rc=0
    "$bin" run --root "$tree" --profile "$profile" --color never --format prometheus >"$out" 2>"$work/stderr" || rc=$?
    # 0, 1 and 3 are verdicts about the tree; 2 means the run never happened.
    [ "$rc" -ne 2 ] || fail "$tree --profile $profile: usage error: $(cat "$work/stderr")"
    grep -q '^fabric_preflight_info{' "$out" || fail "$tree --profile $profile: no info metric"
    promtool check metrics <"$out" >"$work/lint" 2>&1 || fail "promtool on $tree --profile $profile:
$(cat "$work/lint")"
    linted=$((linted + 1))
  done
done
echo "promtool check metrics: clean on $linted reports"

# 2. node_exporter serving each tree's file through the textfile collector.
textdir="$work/textfile"
mkdir "$textdir"
port=$(( 20000 + RANDOM % 20000 ))
prometheus-node-exporter --collector.disable-defaults --collector.textfile \
  --collector.textfile.directory="$textdir" --web.listen-address="127.0.0.1:$port" \
  >"$work/exporter.log" 2>&1 &
exporter_pid=$!
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/metrics" >/dev/null || fail "node_exporter did not start: $(cat "$work/exporter.log")"
# Ours answers, not something else that held the port (node_exporter would have exited on the bind).
kill -0 "$exporter_pid" 2>/dev/null || fail "node_exporter exited: $(cat "$work/exporter.log")"

prom="$textdir/fabric_preflight.prom"
scraped=0
for tree in testdata/hosts/*/; do
  rc=0
  "$bin" run --root "$tree" --profile auto --color never --format json \
    --output "prometheus=$prom" --node-name "$(basename "$tree")" >/dev/null 2>"$work/stderr" || rc=$?
  [ "$rc" -ne 2 ] || fail "$tree: usage error: $(cat "$work/stderr")"
  curl -sf "http://127.0.0.1:$port/metrics" >"$work/scrape" || fail "scrape failed"
  grep -qx 'node_textfile_scrape_error 0' "$work/scrape" \
    || fail "$tree: $(grep node_textfile_scrape_error "$work/scrape"); exporter log: $(tail -3 "$work/exporter.log")"
  want=$(grep -c '^fabric_preflight_' "$prom")
  got=$(grep -c '^fabric_preflight_' "$work/scrape" || true)
  [ "$want" -eq "$got" ] || fail "$tree: $want samples in the file, $got served"
  grep -q "^fabric_preflight_info{.*host=\"$(basename "$tree")\"" "$work/scrape" || fail "$tree: info metric not served"
  scraped=$((scraped + 1))
done
echo "node_exporter textfile collector: $scraped trees served, node_textfile_scrape_error 0 each time"

# 3. Rewrites overlapping scrapes: a reader must see the old file or the new one, never a torn one.
tree=testdata/hosts/hgx-healthy
(
  for _ in $(seq 20); do
    "$bin" run --root "$tree" --color never --format json --output "prometheus=$prom" >/dev/null 2>&1 || true
  done
) &
writer=$!
scrapes=0
while kill -0 "$writer" 2>/dev/null; do
  curl -sf "http://127.0.0.1:$port/metrics" >"$work/scrape" || fail "scrape failed during rewrites"
  grep -qx 'node_textfile_scrape_error 0' "$work/scrape" || fail "torn file seen during rewrites"
  scrapes=$((scrapes + 1))
done
wait "$writer"
leftover=$(find "$textdir" -name '*.tmp' | wc -l)
[ "$leftover" -eq 0 ] || fail "temporary files left in the textfile directory"
echo "atomic rewrite: $scrapes scrapes during 20 rewrites, no scrape error, no temporary left behind"
