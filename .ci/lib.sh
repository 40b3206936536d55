# shellcheck shell=bash
# Helpers the stages source: a download cache, quiet installs of what is missing, pinned Python tools in a venv.
# CI_CACHE (default ~/.cache/fabric-preflight-ci) survives between runs where the CI keeps the home directory.
CI_CACHE="${CI_CACHE:-$HOME/.cache/fabric-preflight-ci}"
mkdir -p "$CI_CACHE"

# apt_install PKG..: installs the packages that are not installed yet. It says so on stderr: helpers whose answer
# is their stdout (`base=$(debian_base bookworm)`) call it, and on a machine that lacked the package its words
# became part of the answer (`podman build --build-arg BASE="installing debootstrap…"`: "invalid reference
# format", seen on a fresh machine).
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# venv_install PKG==VER..: pinned Python tools in a venv under the cache (Debian's pip refuses the system Python);
# puts the venv's bin first on PATH.
venv_install() {
  local venv="$CI_CACHE/venv"
  [ -x "$venv/bin/pip" ] || { apt_install python3-venv; python3 -m venv "$venv"; }
  "$venv/bin/pip" install -q --disable-pip-version-check "$@"
  export PATH="$venv/bin:$PATH"
}

# normalized_report CMD..: `CMD --format json`, less what differs between any two runs (durations, timestamps, the
# per-run scratch directory's name), then its exit code: what two builds of the tool must agree on.
normalized_report() {
  local json rc=0
  json=$("$@" --format json) || rc=$?
  printf '%s' "$json" | python3 -c '
import json, re, sys
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if k not in ("duration_ms", "timestamp")}
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, str):
        return re.sub(r"fabric-preflight-\d+-\d+", "fabric-preflight-PID-N", v)
    return v
json.dump(clean(json.load(sys.stdin)), sys.stdout, indent=1, sort_keys=True)'
  echo
  echo "exit $rc"
}

# check_portable BINARY LOADER: what lets one binary start on every glibc ≥ 2.28 host of its architecture: no
# GLIBC symbol version above 2.28 (objdump -T), and nothing NEEDED but glibc's own libraries and LOADER
# (ld-linux-x86-64, ld-linux-aarch64): vendor libraries are opened at run time. Says what it found.
check_portable() {
  local binary=$1 loader=$2 versions newest needed unexpected
  versions=$(objdump -T "$binary" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V)
  [ -n "$versions" ] || { echo "FAIL: objdump -T shows no GLIBC symbol version: is $binary a glibc binary?" >&2; return 1; }
  newest=$(printf '%s\n' "$versions" | tail -n 1)
  if [ "$(printf '%s\n' "$newest" GLIBC_2.28 | sort -V | tail -n 1)" != GLIBC_2.28 ]; then
    echo "FAIL: $binary needs $newest; symbols above GLIBC_2.28:" >&2
    objdump -T "$binary" | grep -E "GLIBC_2\.(29|[3-9][0-9])" | head -n 20 >&2
    return 1
  fi
  echo "objdump -T $binary: newest symbol version $newest (limit GLIBC_2.28)"
  needed=$(readelf -d "$binary" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p')
  unexpected=$(printf '%s\n' "$needed" | grep -Ev "^(libc|libm|libdl|libpthread|librt|libgcc_s|$loader)\.so" || true)
  [ -z "$unexpected" ] || { echo "FAIL: $binary needs more than glibc: $unexpected" >&2; return 1; }
  echo "NEEDED: $(printf '%s' "$needed" | tr '\n' ' ')"
}

# podman_setup: podman as the container stages run it: runc as the runtime, and no default ulimits, which this
# sandbox refuses. CONTAINERS_CONF keeps both out of /etc and reaches podman in a namespace too (with_aarch64).
podman_setup() {
  apt_install podman runc
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\n' > "$CI_CACHE/containers.conf"
  export CONTAINERS_CONF="$CI_CACHE/containers.conf"
}

# qemu_aarch64_static: the path of a statically linked qemu-aarch64, cached: Debian's qemu-user one needs this
# machine's libraries, which a chroot or a container does not have. Only the one file is taken from
# qemu-user-static's package; installing it could register interpreters with the host's binfmt_misc.
qemu_aarch64_static() {
  local qemu="$CI_CACHE/qemu-aarch64-static" debs
  if [ ! -x "$qemu" ]; then
    debs=$(mktemp -d)
    (cd "$debs" && apt-get -qq -o APT::Sandbox::User=root download qemu-user-static >&2)
    dpkg-deb --fsys-tarfile "$debs"/qemu-user-static_*.deb | tar -xO ./usr/bin/qemu-aarch64-static > "$qemu.tmp"
    chmod +x "$qemu.tmp" && mv "$qemu.tmp" "$qemu"
    rm -rf "$debs"
  fi
  echo "$qemu"
}

# binfmt_aarch64 INTERPRETER: has the kernel start aarch64 ELF files with INTERPRETER, through a binfmt_misc
# instance mounted at the usual /proc/sys/fs/binfmt_misc. Run it in a user and mount namespace of its own: Linux
# ≥ 6.7 gives that namespace its own instance (the host's is left alone), which every process below it uses,
# podman's containers included. F: the kernel opens INTERPRETER now, so a static one starts them in a chroot too.
binfmt_aarch64() {
  if ! mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null; then
    echo "FAIL: cannot mount a binfmt_misc instance in a user namespace (Linux ≥ 6.7 can; this is $(uname -r))." >&2
    return 1
  fi
  local magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
  local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
  printf ':qemu-aarch64:M::%s:%s:%s:F' "$magic" "$mask" "$1" > /proc/sys/fs/binfmt_misc/register
}

# with_aarch64 CMD..: CMD (a program, not a function) in a user and mount namespace of its own where the kernel
# starts aarch64 programs with qemu-aarch64-static (binfmt_aarch64). Uids and gids 0-65535 map to themselves, so
# podman and dpkg there own files as they do outside (root, _apt, nobody...). Not all 2^32: runc takes a full map
# for the host's namespace and then mounts sysfs, which a container sharing the host's network may not; in a
# user namespace it binds /sys instead. The namespace ends with CMD.
with_aarch64() {
  local qemu fifo pid rc=0
  qemu=$(qemu_aarch64_static)
  fifo=$(mktemp -u) && mkfifo "$fifo"
  # The maps can only be written from outside: the child waits on the FIFO until they are.
  # shellcheck disable=SC2016 # expanded by the child
  unshare --user --mount --fork bash -c "$(declare -f binfmt_aarch64)"'
    read -r _ < "$1" && binfmt_aarch64 "$2" && shift 2 && exec "$@"' with_aarch64 "$fifo" "$qemu" "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ "$(readlink "/proc/$pid/ns/user")" = "$(readlink /proc/self/ns/user)" ]; do
    sleep 0.01
  done
  { echo '0 0 65536' > "/proc/$pid/uid_map" && echo '0 0 65536' > "/proc/$pid/gid_map" && echo go > "$fifo"; } \
    || kill "$pid" 2>/dev/null
  wait "$pid" || rc=$?
  rm -f "$fifo"
  return "$rc"
}

# debian_base SUITE [ARCH]: localhost/debian-min:SUITE (ARCH amd64, the default) or :SUITE-arm64, a minbase
# debootstrap of that Debian release (no registry is reachable from CI), cached as a tarball. Needs podman_setup.
debian_base() {
  local suite=$1 arch=${2:-amd64} name mirror rootfs
  case "$arch" in
    amd64) name=$suite ;;
    arm64) name=$suite-arm64 ;;
    *) echo "debian_base: ARCH is amd64 or arm64, not '$arch'" >&2; return 2 ;;
  esac
  local image="localhost/debian-min:$name" tarball="$CI_CACHE/debian-min-$name.tar"
  if ! podman image exists "$image"; then
    if [ ! -s "$tarball" ]; then
      apt_install debootstrap
      mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p; s/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) bookworm .*/\2/p' \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | grep -v security | head -n 1 || true)
      rootfs=$(mktemp -d)
      if [ "$arch" = amd64 ]; then
        debootstrap --variant=minbase "$suite" "$rootfs" "${mirror:-http://deb.debian.org/debian}" >/dev/null
      else
        # The first stage only downloads and unpacks (and makes /dev's nodes, which a user namespace may not);
        # the second runs the base's own dpkg and maintainer scripts, emulated. container=lxc: debootstrap
        # then skips its mknod test of the target.
        debootstrap --arch="$arch" --foreign --variant=minbase "$suite" "$rootfs" \
          "${mirror:-http://deb.debian.org/debian}" >/dev/null
        with_aarch64 env container=lxc chroot "$rootfs" /debootstrap/debootstrap --second-stage >/dev/null
      fi
      tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
      rm -rf "$rootfs"
    fi
    podman import -q --arch "$arch" "$tarball" "$image" >/dev/null
  fi
  echo "$image"
}

# image_carries IMAGE BINARY MACHINE: IMAGE holds exactly BINARY as /usr/local/bin/fabric-preflight, and
# rdma-core's libibverbs, librdmacm and the mlx5 and rxe providers for MACHINE (readelf's name: X86-64, AArch64)
# where that architecture's Debian keeps them. Read from the image's files, not by running it.
image_carries() {
  local image=$1 binary=$2 machine=$3 root libdir lib problem=
  case "$machine" in
    X86-64) libdir=usr/lib/x86_64-linux-gnu ;;
    AArch64) libdir=usr/lib/aarch64-linux-gnu ;;
    *) echo "image_carries: MACHINE is X86-64 or AArch64, not '$machine'" >&2; return 2 ;;
  esac
  root=$(podman image mount "$image")
  cmp -s "$binary" "$root/usr/local/bin/fabric-preflight" \
    || problem="its /usr/local/bin/fabric-preflight is not $binary"
  for lib in libibverbs.so.1 librdmacm.so.1 libibverbs/libmlx5-rdmav*.so libibverbs/librxe-rdmav*.so; do
    [ -z "$problem" ] || break
    # shellcheck disable=SC2086 # the glob names the provider whatever its ABI number
    readelf -h "$root/$libdir/"$lib 2>/dev/null | grep "Machine:.*$machine" >/dev/null \
      || problem="rdma-core's $lib for $machine is not in /$libdir"
  done
  podman image unmount "$image" >/dev/null
  [ -z "$problem" ] || { echo "FAIL: $image: $problem" >&2; return 1; }
}
