#!/usr/bin/env bash
# The arm64 image (Grace, Graviton), built on this x86_64 machine from the one ./Containerfile, as a user would
# build it (README "Container image"): `podman build --platform linux/arm64` with the aarch64 portable binary on
# an arm64 Debian base. Checks: the image is linux/arm64, holds exactly that binary and rdma-core's aarch64
# libraries; run in its own root filesystem, the binary gives the same normalized JSON and exit code as the
# x86_64 portable binary outside on every recorded tree; the manifest list of both images names both platforms.
#
# Emulation: the Containerfile's RUN (the base's apt-get) and the base's second debootstrap stage run arm64
# programs, and so does every `podman run`. Podman and the second stage run in a user and mount namespace of
# their own (with_aarch64), whose binfmt_misc instance hands aarch64 ELF files to a static qemu-aarch64 (Linux ≥
# 6.7; the host's binfmt_misc is left alone). That keeps the one Containerfile, RUN step included, instead of an
# image assembled from unpacked .debs that users would not build. Cost: the base (once, then cached under
# $CI_CACHE) and the RUN step are emulated; podman caches the RUN layer while the base does not change.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh
# rdma-core's amd64 user space outside: trees without recorded library answers ask the libraries live (in child
# processes), the x86_64 binary here and the aarch64 one in the image, each its own architecture's rdma-core.
apt_install python3 binutils rdma-core ibverbs-providers
podman_setup
x86=$(.ci/build-portable x86_64)
arm=$(.ci/build-portable aarch64)

start=$SECONDS
base=$(debian_base bookworm arm64)
image=localhost/fabric-preflight:ci-arm64
# --network host: in a user namespace podman cannot set up its bridge in the host's network namespace, and the
# RUN step's apt-get needs the Debian mirror.
with_aarch64 podman build -q --network host --platform linux/arm64 -t "$image" --build-arg BASE="$base" \
  --build-arg BINARY="$arm" -f Containerfile . >/dev/null
platform=$(podman image inspect --format '{{.Os}}/{{.Architecture}}' "$image")
[ "$platform" = linux/arm64 ] || { echo "FAIL: $image is $platform, not linux/arm64" >&2; exit 1; }
image_carries "$image" "$arm" AArch64
echo "built $image ($platform) on $base in $((SECONDS - start)) s: it holds $arm and rdma-core's aarch64 libraries"

# The tree is mounted at the same path inside, so the reports' paths match too; IPC_LOCK as in 30-container.sh.
in_arm64_container() {
  with_aarch64 podman run --rm --platform linux/arm64 --network none --cap-add IPC_LOCK \
    -v "$PWD/testdata:$PWD/testdata:ro" "$image" "$@"
}
start=$SECONDS
trees=0 child_trees=0
for tree in testdata/hosts/*/; do
  diff <(normalized_report "$x86" run --root "$PWD/$tree") <(normalized_report in_arm64_container run --root "$PWD/$tree") \
    || { echo "FAIL: the arm64 image reports $tree differently from the x86_64 portable binary" >&2; exit 1; }
  trees=$((trees + 1))
  [ -f "$tree/vendor-answers.json" ] || child_trees=$((child_trees + 1))
done
[ "$child_trees" -gt 0 ] || { echo "FAIL: no recorded tree without vendor-answers.json: no child process ran" >&2; exit 1; }
echo "the arm64 image and the x86_64 binary give the same JSON and exit code on all $trees recorded trees" \
  "($child_trees of them asked the libraries in child processes; $((SECONDS - start)) s)"

# One name for both architectures, as README "Container image" makes it: a manifest list of this image and the
# x86_64 one (30-container.sh's; podman's layer cache makes this build quick after that stage).
amd64_image=localhost/fabric-preflight:ci
podman build -q -t "$amd64_image" --build-arg BASE="$(debian_base bookworm)" -f Containerfile . >/dev/null
list=localhost/fabric-preflight:ci-multi
podman manifest exists "$list" && podman manifest rm "$list" >/dev/null
podman manifest create "$list" "containers-storage:$amd64_image" "containers-storage:$image" >/dev/null
platforms=$(podman manifest inspect "$list" | python3 -c '
import json, sys
print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')
podman manifest rm "$list" >/dev/null
[ "$platforms" = "linux/amd64 linux/arm64" ] \
  || { echo "FAIL: the manifest list of both images names '$platforms', not linux/amd64 and linux/arm64" >&2; exit 1; }
echo "manifest list of $amd64_image and $image: $platforms"
