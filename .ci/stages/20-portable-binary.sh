#!/usr/bin/env bash
# The portable binary (cargo-zigbuild, glibc 2.28): no symbol newer than GLIBC_2.28 (objdump -T), nothing but
# glibc's own libraries NEEDED, and on every recorded tree the same report and exit code as the ordinary build.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
apt_install binutils python3
portable=$(.ci/build-portable)
cargo build -q --release --locked
native=target/release/fabric-preflight

check_portable "$portable" ld-linux-x86-64

trees=0
for tree in testdata/hosts/*/; do
  diff <(normalized_report "$native" run --root "$tree") <(normalized_report "$portable" run --root "$tree") \
    || { echo "FAIL: the portable binary reports $tree differently" >&2; exit 1; }
  trees=$((trees + 1))
done
echo "portable and native builds agree on all $trees recorded trees ($(du -h "$portable" | cut -f1), $portable)"
