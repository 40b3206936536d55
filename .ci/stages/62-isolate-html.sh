#!/usr/bin/env bash
# isolate's HTML report in a real browser (Debian's chromium, headless): the page of an 8-node search with one bad
# node (tests/isolate/job, the real collective per group) renders with no outside resource, the culprit's row
# marked, and the screenshot is kept in $OUT (default target/ci/isolate) for review.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() {
  echo "62-isolate-html: FAIL: $*" >&2
  exit 1
}

if ! command -v chromium >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

bin=${BIN:-target/release/fabric-preflight}
[ -x "$bin" ] || cargo build --release --locked
out=${OUT:-target/ci/isolate}
mkdir -p "$out"
out=$(realpath "$out")
bin=$(realpath "$bin")
rc=0
FABRIC_PREFLIGHT="$bin" ISOLATE_BAD=n5 "$bin" isolate --nodes 'n[1-8]' --work-dir "$out/groups" \
  --output "html=$out/isolate.html" --output "json=$out/isolate.json" -- \
  "$PWD/tests/isolate/job" '{nodes}' '{report}' || rc=$?
[ "$rc" -eq 1 ] || fail "isolate exited $rc, expected 1 (a culprit)"
grep -q '<tr class="culprit_node"><td class="n"[^>]*>n5<' "$out/isolate.html" || fail "n5's row is not marked"
! grep -Eq '(src|href)=' "$out/isolate.html" || fail "the page refers to an outside resource"

# The DOM as rendered: the matrix is there with one row per node, and the culprit's cell is styled red.
dom=$(timeout 60 chromium --headless --no-sandbox --disable-gpu --dump-dom "file://$out/isolate.html")
[ "$(grep -o '<tr class="' <<<"$dom" | wc -l)" -ge 8 ] || fail "fewer than 8 node rows rendered"
timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
  --screenshot="$out/isolate.png" "file://$out/isolate.html" 2>/dev/null
[ -s "$out/isolate.png" ] || fail "no screenshot"
echo "62-isolate-html: ok, screenshot $out/isolate.png"
