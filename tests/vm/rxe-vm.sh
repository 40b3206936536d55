#!/usr/bin/env bash
# rxe-vm.sh: boots two QEMU VMs running Debian 12's own kernel with a real soft-RoCE device (rdma_rxe) each,
# joined by a qemu UDP socket link on 127.0.0.1, runs fabric-preflight inside them (tests/vm/guest.sh) and
# unpacks what the guests wrote into OUT (default target/rxe-vm/out): OUT/a and OUT/b, one JSON report per run.
# tests/rxe_vm.rs asserts on them; `.ci/stages/50-rxe-vm.sh` runs both.
#
# Needs (installed by the CI stage): qemu-system-x86, busybox-static, rdma-core, ibverbs-providers,
# ibverbs-utils, cpio, kmod, iproute2, xz-utils. Downloads Debian's kernel package once into CACHE.
# TCG only: these machines cannot run KVM guests (nested virtualisation is missing), so no KVM probe.
#
# Environment: FABRIC_PREFLIGHT (binary, default target/release/fabric-preflight), RXE_VM_CACHE (default
# target/rxe-vm), RXE_VM_OUT (default $RXE_VM_CACHE/out), RXE_VM_TIMEOUT (seconds for the VM pair, default 240).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${RXE_VM_CACHE:-$REPO/target/rxe-vm}
OUT=${RXE_VM_OUT:-$CACHE/out}
TOOL=${FABRIC_PREFLIGHT:-$REPO/target/release/fabric-preflight}
TIMEOUT=${RXE_VM_TIMEOUT:-240}
T0=$SECONDS
log() { printf '[rxe-vm %4ss] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }

for cmd in qemu-system-x86_64 busybox cpio depmod modprobe dpkg-deb xz ldd; do
    command -v "$cmd" >/dev/null || die "$cmd not found (the CI stage installs qemu-system-x86 busybox-static cpio kmod)"
done
for f in /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/rdma /etc/libibverbs.d/rxe.driver; do
    [[ -e $f ]] || die "$f not found (install rdma-core ibverbs-providers ibverbs-utils)"
done
[[ -x $TOOL ]] || die "$TOOL not built (cargo build --release)"
mkdir -p "$CACHE/debs"
CACHE=$(cd "$CACHE" && pwd)

# ---------------------------------------------------------------- kernel: the one Debian 12's linux-image-amd64 names
KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
[[ -n $KPKG ]] || die "apt-cache knows no linux-image-amd64 (run apt-get update)"
if ! ls "$CACHE/debs/${KPKG}"_*.deb >/dev/null 2>&1; then
    log "downloading $KPKG"
    (cd "$CACHE/debs" && apt-get download "$KPKG" 2>&1 | grep -v unsandboxed >&2) || true
fi
deb=$(ls "$CACHE/debs/${KPKG}"_*.deb 2>/dev/null | sort -V | tail -1)
[[ -n $deb ]] || die "could not download $KPKG"
KVER=${KPKG#linux-image-}
KROOT=$CACHE/kroot-$KVER
if [[ ! -f $KROOT/.done ]]; then
    log "extracting $(basename "$deb")"
    rm -rf "$KROOT" && mkdir -p "$KROOT"
    dpkg-deb -x "$deb" "$KROOT"
    depmod -b "$KROOT" "$KVER"
    # The ELF vmlinux inside the bzImage boots through its PVH entry, skipping the decompressor (3 s, not 9 s, to
    # /init under TCG).
    off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$KROOT/boot/vmlinuz-$KVER" | head -1 | cut -d: -f1)
    tail -c +$((off + 1)) "$KROOT/boot/vmlinuz-$KVER" | xz -dc --single-stream >"$KROOT/vmlinux" 2>/dev/null || true
    [[ $(head -c4 "$KROOT/vmlinux" | od -An -c | tr -d ' ') == 177ELF ]] || rm -f "$KROOT/vmlinux"
    touch "$KROOT/.done"
fi
KIMG=$KROOT/vmlinux
[[ -s $KIMG ]] || KIMG=$KROOT/boot/vmlinuz-$KVER

# ---------------------------------------------------------------- initramfs: busybox, modules, rdma-core, the tool
IRD=$CACHE/initramfs
IMG=$CACHE/initramfs.cpio.gz
rm -rf "$IRD"
mkdir -p "$IRD"/{bin,etc,proc,sys,dev,tmp,run,root,out,usr/bin,usr/sbin,usr/lib64} "$IRD/usr/lib/x86_64-linux-gnu"
ln -s usr/lib "$IRD/lib"
ln -s usr/lib64 "$IRD/lib64"
ln -s usr/sbin "$IRD/sbin"
cp "$(command -v busybox)" "$IRD/bin/busybox"
: >"$IRD/etc/modules.load"
for m in virtio_pci virtio_net virtio_blk crc32_generic rdma_rxe ib_uverbs; do
    modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
    rel=${ko#"$KROOT"/lib/modules/"$KVER"/}
    mkdir -p "$IRD/lib/modules/$KVER/$(dirname "$rel")"
    cp "$ko" "$IRD/lib/modules/$KVER/$rel"
    echo "$rel" >>"$IRD/etc/modules.load"
done
copy_with_libs() { # each file at its resolved path, with its ldd closure (merged /usr: both names)
    local f lib real
    for f in "$@"; do
        for real in "$f" "$(readlink -f "$f")"; do
            mkdir -p "$IRD$(dirname "$real")" && cp -L "$f" "$IRD$real"
        done
        ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/[^ ]*ld-linux/{print $1}' | while read -r lib; do
            for real in "$lib" "$(readlink -f "$lib")"; do
                [[ -e $IRD$real ]] || { mkdir -p "$IRD$(dirname "$real")" && cp -L "$lib" "$IRD$real"; }
            done
        done
    done
}
ML=/usr/lib/x86_64-linux-gnu
copy_with_libs /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/rdma "$(command -v ip)" \
    "$ML/libibverbs/librxe-rdmav34.so" "$ML/libibverbs.so.1"
mkdir -p "$IRD/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$IRD/etc/libibverbs.d/"
copy_with_libs "$TOOL"
mv "$IRD$(readlink -f "$TOOL")" "$IRD/usr/bin/fabric-preflight"
cp "$REPO/tests/vm/guest.sh" "$IRD/init"
chmod +x "$IRD/init"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n' >"$IRD/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$IRD/etc/group"
(cd "$IRD" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1 >"$IMG")
log "kernel $KVER, initramfs $(du -h "$IMG" | cut -f1)"

# ---------------------------------------------------------------- boot: two VMs, 1 vCPU each, TCG
rm -rf "$OUT" && mkdir -p "$OUT"
PA=$((20000 + RANDOM % 20000)); PB=$((PA + 1))
boot() { # name role myip peer mac localport remoteport
    local name=$1
    # Results come back as a tar written onto a raw virtio disk: no host network, no 9p.
    truncate -s 64M "$OUT/$name.tar"
    timeout "$TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 1024 \
        -nodefaults -no-user-config -display none -no-reboot \
        -kernel "$KIMG" -initrd "$IMG" \
        -append "console=ttyS0 panic=-1 loglevel=4 vmrole=$2 vmip=$3 vmpeer=$4" \
        -serial "file:$OUT/console-$name.log" \
        -drive "file=$OUT/$name.tar,format=raw,if=virtio" \
        -netdev "socket,id=n0,udp=127.0.0.1:$7,localaddr=127.0.0.1:$6" \
        -device "virtio-net-pci,netdev=n0,mac=$5" >"$OUT/qemu-$name.out" 2>&1
}
log "booting VM a (node under test) and VM b (its peer), TCG, 1 vCPU each"
boot a a 10.99.0.1 10.99.0.2 52:54:00:99:00:01 "$PA" "$PB" &
pa=$!
boot b b 10.99.0.2 10.99.0.1 52:54:00:99:00:02 "$PB" "$PA" &
pb=$!
rca=0; rcb=0
wait $pa || rca=$?
wait $pb || rcb=$?
log "VMs powered off (qemu exit a=$rca b=$rcb)"
for name in a b; do
    cat "$OUT/qemu-$name.out" >&2
    grep -a '^### ' "$OUT/console-$name.log" | tr -d '\r' | sed "s/^/[vm $name] /" >&2 || true
    mkdir -p "$OUT/$name"
    tar -xf "$OUT/$name.tar" -C "$OUT/$name" 2>/dev/null || die "VM $name wrote no results (console: $OUT/console-$name.log)"
    rm -f "$OUT/$name.tar"
done
((rca == 0)) || die "VM a: qemu exit $rca (124 = timed out after $TIMEOUT s; console: $OUT/console-a.log)"
((rcb == 0)) || die "VM b: qemu exit $rcb (console: $OUT/console-b.log)"
[[ -f $OUT/a/DONE && -f $OUT/b/DONE ]] || die "a guest did not finish its scenario (see $OUT/console-*.log)"
log "results in $OUT ($(ls "$OUT/a" | wc -l) files from a, $(ls "$OUT/b" | wc -l) from b)"
