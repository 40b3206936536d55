#!/usr/bin/env bash
# The container image: built with podman from ./Containerfile on a Debian base assembled by debootstrap (no
# registry is reachable), carrying the portable binary and rdma-core's user space. `run --root` of recorded
# trees inside it must give the same JSON and exit code as the same binary outside.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
apt_install podman debootstrap runc python3
portable=$(.ci/build-portable)

# This sandbox refuses podman's default ulimits; CONTAINERS_CONF keeps the setting out of /etc.
printf '[containers]\ndefault_ulimits = []\n' > "$CI_CACHE/containers.conf"
export CONTAINERS_CONF="$CI_CACHE/containers.conf"
podman() { command podman --runtime runc "$@"; }

base=localhost/debian-min:bookworm
base_tar="$CI_CACHE/debian-min-bookworm.tar"
if ! podman image exists "$base"; then
  if [ ! -s "$base_tar" ]; then
    mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p; s/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) bookworm .*/\2/p' \
      /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1 || true)
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" >/dev/null
    tar -C "$rootfs" -cf "$base_tar.tmp" . && mv "$base_tar.tmp" "$base_tar"
    rm -rf "$rootfs"
  fi
  podman import -q "$base_tar" "$base" >/dev/null
fi

image=localhost/fabric-preflight:ci
podman build -q -t "$image" --build-arg BASE="$base" -f Containerfile . >/dev/null
echo "built $image on $base"

# The image carries exactly the portable binary, and rdma-core's libraries load from their usual place.
want=$(sha256sum < "$portable")
got=$(podman run --rm --network none --entrypoint /bin/sh "$image" -c 'sha256sum < /usr/local/bin/fabric-preflight')
[ "$want" = "$got" ] || { echo "FAIL: the image's binary is not $portable" >&2; exit 1; }
podman run --rm --network none --entrypoint /bin/sh "$image" -c \
  'ls /usr/lib/x86_64-linux-gnu/libibverbs.so.1 /usr/lib/x86_64-linux-gnu/librdmacm.so.1 \
      /usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav*.so /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so' \
  >/dev/null || { echo "FAIL: rdma-core user space missing from the image" >&2; exit 1; }

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
