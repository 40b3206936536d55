#!/usr/bin/env bash
# The container image: built with podman from ./Containerfile on a Debian base assembled by debootstrap (no
# registry is reachable), carrying the portable binary and rdma-core's user space. `run --root` of recorded
# trees inside it must give the same JSON and exit code as the same binary outside. Then the portable binary on
# Debian 11's older glibc, where the ordinary build cannot start.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
# rdma-core's user space outside too: a tree without recorded library answers asks the libraries live, so the
# binary outside must find the same ones the image carries (a machine without them reported `rdma-core is not
# installed` where the image's libibverbs answered ENOSYS: seen on a fresh machine, where no earlier stage had
# installed them).
apt_install python3 binutils rdma-core ibverbs-providers
podman_setup
portable=$(.ci/build-portable)
cargo build -q --release --locked   # the ordinary build, to show it cannot start on Debian 11

base=$(debian_base bookworm)

image=localhost/fabric-preflight:ci
podman build -q -t "$image" --build-arg BASE="$base" -f Containerfile . >/dev/null
echo "built $image on $base"

image_carries "$image" "$portable" X86-64

# The tree is mounted at the same path inside, so the reports' paths match too; IPC_LOCK as in the Kubernetes
# manifests (rdma.memlock judges the running process).
in_container() {
  podman run --rm --network none --cap-add IPC_LOCK -v "$PWD/testdata:$PWD/testdata:ro" "$image" "$@"
}
trees=0
for tree in testdata/hosts/*/; do
  diff <(normalized_report "$portable" run --root "$PWD/$tree") <(normalized_report in_container run --root "$PWD/$tree") \
    || { echo "FAIL: the image reports $tree differently from the binary outside" >&2; exit 1; }
  trees=$((trees + 1))
done
echo "image and binary outside give the same JSON and exit code on all $trees recorded trees"

# An older glibc for real: Debian 11 has glibc 2.31 (2.28's Debian 10 has left the mirrors). The ordinary build
# (GLIBC_2.34) cannot start there; the portable one replays a tree exactly as on Debian 12.
old_base=$(debian_base bullseye)
on_bullseye() {
  podman run --rm --network none --cap-add IPC_LOCK -v "$PWD/target:$PWD/target:ro" -v "$PWD/testdata:$PWD/testdata:ro" \
    "$old_base" "$@"
}
# Read all of it, then keep the first line: `| head` would close the pipe under podman's attach, which then
# fails with "broken pipe" (seen in CI).
glibc=$(on_bullseye ldd --version)
glibc=${glibc%%$'\n'*}
if refusal=$(on_bullseye "$PWD/target/release/fabric-preflight" --version 2>&1) \
   || ! grep -q "version .GLIBC_2\.3[0-9]*' not found" <<<"$refusal"; then
  echo "FAIL: the ordinary build did not fail on Debian 11's glibc ($glibc): this check proves nothing: $refusal" >&2
  exit 1
fi
# Trees with recorded library answers: the bare Debian 11 has no rdma-core, and nothing here may call it.
trees=0
for tree in testdata/hosts/*/; do
  [ -f "$tree/vendor-answers.json" ] || continue
  diff <(normalized_report "$portable" run --root "$PWD/$tree") \
       <(normalized_report on_bullseye "$PWD/$portable" run --root "$PWD/$tree") \
    || { echo "FAIL: the portable binary reports $tree differently on Debian 11" >&2; exit 1; }
  trees=$((trees + 1))
done
[ "$trees" -gt 0 ] || { echo "FAIL: no recorded tree with vendor answers to replay on Debian 11" >&2; exit 1; }
echo "Debian 11 ($glibc): the ordinary build does not start; the portable one gives the same JSON and exit code" \
  "on $trees recorded trees"
