#!/usr/bin/env bash
# portable-live.sh: the portable binary (glibc 2.28, cargo-zigbuild) against the ordinary build on a live GPU
# machine, where the vendor libraries are really opened at run time. Measured values move between runs, so the
# two are compared on what they decide: each result's (check, subject, status) and the exit code; then the NPD
# line and its exit code. A check for a GPU machine, not a test.
#
#   bench/portable-live.sh [run flags, e.g. --profile hgx-h200-ib]
#
# Builds both binaries when missing; a machine that reaches no registry needs them carried in (target/release/
# and target/x86_64-unknown-linux-gnu/release/).
set -euo pipefail
cd "$(dirname "$0")/.."
native=target/release/fabric-preflight
portable=target/x86_64-unknown-linux-gnu/release/fabric-preflight
[ -x "$native" ] || cargo build -q --release --locked
[ -x "$portable" ] || .ci/build-portable >/dev/null
verdicts() {
  local rc=0 json
  json=$("$@" --format json) || rc=$?
  printf '%s' "$json" | python3 -c '
import json, sys
for c in json.load(sys.stdin)["checks"]:
    print(c["id"], c.get("subject") or "-", c["status"])'
  echo "exit $rc"
}
diff <(verdicts "$native" run "$@") <(verdicts "$portable" run "$@") && echo "same verdicts: native and portable"
echo "objdump -T newest: $(objdump -T "$portable" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
rc=0; line=$("$portable" run --format npd "$@") || rc=$?
echo "npd: exit $rc: $line"
