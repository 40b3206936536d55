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

versions=$(objdump -T "$portable" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V)
[ -n "$versions" ] || { echo "FAIL: objdump -T shows no GLIBC symbol version: is $portable a glibc binary?" >&2; exit 1; }
newest=$(printf '%s\n' "$versions" | tail -n 1)
if [ "$(printf '%s\n' "$newest" GLIBC_2.28 | sort -V | tail -n 1)" != GLIBC_2.28 ]; then
  echo "FAIL: $portable needs $newest; symbols above GLIBC_2.28:" >&2
  objdump -T "$portable" | grep -E "GLIBC_2\.(29|[3-9][0-9])" | head -n 20 >&2
  exit 1
fi
echo "objdump -T: newest symbol version $newest (limit GLIBC_2.28)"

needed=$(readelf -d "$portable" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p')
unexpected=$(printf '%s\n' "$needed" | grep -Ev '^(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux-x86-64)\.so' || true)
[ -z "$unexpected" ] || { echo "FAIL: $portable needs more than glibc: $unexpected" >&2; exit 1; }
echo "NEEDED: $(printf '%s' "$needed" | tr '\n' ' ')"

trees=0
for tree in testdata/hosts/*/; do
  diff <(normalized_report "$native" run --root "$tree") <(normalized_report "$portable" run --root "$tree") \
    || { echo "FAIL: the portable binary reports $tree differently" >&2; exit 1; }
  trees=$((trees + 1))
done
echo "portable and native builds agree on all $trees recorded trees ($(du -h "$portable" | cut -f1), $portable)"
