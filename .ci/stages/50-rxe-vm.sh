#!/usr/bin/env bash
# A real RDMA stack: Debian 12's own kernel with rdma_rxe (soft-RoCE) in three QEMU VMs (TCG) joined by unicast
# UDP links on 127.0.0.1 (no multicast). tests/vm/rxe-vm.sh boots them and runs the release binary inside, healthy
# and under live faults, rings of three, and `isolate` with `pair` as its measure; tests/rxe_vm.rs asserts on the
# JSON reports they wrote. Fails (never skips) where qemu cannot run.
set -euo pipefail
cd "$(dirname "$0")/../.."
pkgs=(qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils cpio kmod iproute2 xz-utils gcc libc6-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ] || [ -z "$(apt-cache depends linux-image-amd64 2>/dev/null)" ]; then
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ -x target/release/fabric-preflight ] || cargo build --release --locked
echo "rxe-vm: three VMs (TCG, 1 vCPU, 1 GiB each), Debian kernel + rdma_rxe, fabric-preflight healthy and under live faults, a ring of three, isolate with pair as its measure, the GPU-memory leg through the CUDA stand-in"
cache=${RXE_VM_CACHE:-target/rxe-vm}
time RXE_VM_CACHE=$cache tests/vm/rxe-vm.sh
RXE_VM_RESULTS=$cache/out cargo test --locked --test rxe_vm -- --ignored
