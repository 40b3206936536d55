#!/usr/bin/env bash
# aarch64 (Grace, GH200/GB200 trays, Graviton): the portable aarch64 binary, cross-built on this x86_64 machine
# (cargo-zigbuild, glibc 2.28), must be what the x86_64 one is. Its ELF: AArch64, no GLIBC symbol above 2.28,
# nothing NEEDED beyond glibc. Under qemu-aarch64, on every recorded tree (`run`, `topo`), every NCCL log row of
# testdata/nccl/expected.tsv (`nccl --expect`), `list`, `profiles`, `explain` and a usage error: the same
# verdicts (check id, subject, status), the same normalized JSON or text, the same exit code as the x86_64
# portable binary.
#
# Child processes: a tree with vendor-answers.json replays its library answers in-process; a tree without one
# asks the libraries live, each in a child process (`__facts`, `__probe`: the binary re-executes
# /proc/self/exe). An aarch64 child is started by the kernel, not by qemu, so this stage gives the kernel a
# binfmt_misc entry for aarch64 ELF files (-> qemu-aarch64) in a user and mount namespace of its own (Linux ≥ 6.7
# mounts a private binfmt_misc instance there; the host's is left alone), and shows with the entry switched off
# that the comparison then fails: the children did run under emulation.
#
# Live libraries: both binaries ask rdma-core the same question. The x86_64 one finds the installed amd64
# rdma-core; the aarch64 one finds arm64 rdma-core (apt-get download into the cache with a private apt state: no
# foreign architecture is added to dpkg) beside libc6-arm64-cross, under QEMU_LD_PREFIX.
set -euo pipefail
cd "$(dirname "$0")/../.."
. .ci/lib.sh

# arm64_prefix: a QEMU_LD_PREFIX tree: libc6-arm64-cross's glibc as /lib, rdma-core's arm64 user space (libibverbs,
# the providers, librdmacm and libnl, which they need) unpacked from Debian's packages. Cached.
arm64_prefix() {
  local prefix="$CI_CACHE/arm64-prefix" apt="$CI_CACHE/arm64-apt" deb opts
  if [ ! -e "$prefix/usr/lib/aarch64-linux-gnu/libibverbs.so.1" ]; then
    rm -rf "$prefix" "$apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$prefix"
    : > "$apt/status"
    opts=(-qq -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o "Dir::State::Lists=$apt/lists"
          -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" update
    (cd "$apt/debs" && apt-get "${opts[@]}" download libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 \
      libnl-route-3-200)
    for deb in "$apt"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    # The cross glibc where the aarch64 loader looks: /lib, beside libnl's /lib/aarch64-linux-gnu.
    mkdir -p "$prefix/lib"
    ln -s /usr/aarch64-linux-gnu/lib/* "$prefix/lib/"
    rm -rf "$apt"
  fi
  echo "$prefix"
}

if [ "${1:-}" != --inside ]; then
  apt_install binutils python3 qemu-user libc6-arm64-cross rdma-core ibverbs-providers
  start=$SECONDS
  x86=$(.ci/build-portable x86_64)
  arm=$(.ci/build-portable aarch64)
  echo "portable builds ready in $((SECONDS - start)) s: $x86, $arm ($(du -h "$arm" | cut -f1))"
  readelf -h "$arm" | grep -q 'Machine:.*AArch64' \
    || { echo "FAIL: $arm is not an AArch64 ELF file: $(readelf -h "$arm" | grep Machine)" >&2; exit 1; }
  interp=$(readelf -l "$arm" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
  [ "$interp" = /lib/ld-linux-aarch64.so.1 ] \
    || { echo "FAIL: $arm asks for the loader '$interp', not /lib/ld-linux-aarch64.so.1" >&2; exit 1; }
  check_portable "$arm" ld-linux-aarch64
  prefix=$(arm64_prefix)
  exec unshare --user --map-root-user --mount bash "$0" --inside "$x86" "$arm" "$prefix"
fi

# In a user and mount namespace of our own, as its root.
x86=$PWD/$2 arm=$PWD/$3
export QEMU_LD_PREFIX=$4
if ! binfmt_aarch64 "$(command -v qemu-aarch64)"; then
  echo "      Without it the aarch64 binary's child processes (__facts, __probe) cannot start here." >&2
  exit 1
fi
"$arm" --version >/dev/null \
  || { echo "FAIL: the kernel does not start $arm through the binfmt_misc entry" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/x86_64" "$out/aarch64"
# each NAME CMD..: CMD's normalized JSON (or text) and exit code from each binary, as $out/ARCH/NAME.
each() {
  local name=$1 kind=$2; shift 2
  if [ "$kind" = json ]; then
    normalized_report "$x86" "$@" > "$out/x86_64/$name"
    normalized_report qemu-aarch64 "$arm" "$@" > "$out/aarch64/$name"
  else
    { "$x86" "$@" 2>&1; echo "exit $?"; } > "$out/x86_64/$name" || true
    { qemu-aarch64 "$arm" "$@" 2>&1; echo "exit $?"; } > "$out/aarch64/$name" || true
  fi
}
# verdicts DIR: one line per check (file, check id, subject, status), per NCCL verdict, and per exit code.
verdicts() {
  python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    text = open(os.path.join(d, name)).read()
    body, _, code = text.rstrip("\n").rpartition("\n")
    print(f"{name}\t{code}")
    try:
        report = json.loads(body)
    except ValueError:
        continue
    for c in report.get("checks", []) if isinstance(report, dict) else []:
        print(f"{name}\t{c.get('id')}\t{c.get('subject') or '-'}\t{c.get('status')}")
    if isinstance(report, dict) and "verdict" in report:
        print(f"{name}\tverdict\t{report['verdict']}")
PY
}

start=$SECONDS
# Two halves at once, one a core: the recorded trees, then the NCCL logs and the text commands.
trees=0 logs=0 child_trees=()
for tree in testdata/hosts/*/; do
  trees=$((trees + 1))
  [ -f "$tree/vendor-answers.json" ] || child_trees+=("$(basename "$tree")")
done
(
  for tree in testdata/hosts/*/; do
    name=$(basename "$tree")
    each "run-$name" json run --root "$PWD/$tree"
    each "topo-$name" json topo --root "$PWD/$tree"
  done
) &
half=$!
while IFS=$'\t' read -r file expect _; do
  case "$file" in ''|'#'*) continue ;; esac
  each "nccl-$file-$expect" json nccl --expect "$expect" "$PWD/testdata/nccl/$file"
  logs=$((logs + 1))
done < testdata/nccl/expected.tsv
each list text list
each profiles text profiles
each explain-rdma.link text explain rdma.link
each usage-error text run --no-such-flag
wait "$half"

if ! diff -u --label x86_64 --label aarch64 <(verdicts "$out/x86_64") <(verdicts "$out/aarch64"); then
  echo "FAIL: the aarch64 binary's verdicts differ from the x86_64 one's (above: file, check, subject, status)" >&2
  exit 1
fi
if ! diff -ru "$out/x86_64" "$out/aarch64" > "$out/json.diff"; then
  head -n 60 "$out/json.diff" >&2
  echo "FAIL: same verdicts, but the aarch64 binary's reports differ from the x86_64 one's (diff above)" >&2
  exit 1
fi
[ ${#child_trees[@]} -gt 0 ] || { echo "FAIL: no recorded tree without vendor-answers.json: no child process ran" >&2; exit 1; }
echo "aarch64 under qemu and x86_64 agree on $trees trees (run, topo), $logs NCCL log rows, list, profiles," \
  "explain and a usage error ($(ls "$out/x86_64" | wc -l) outputs, $((SECONDS - start)) s);" \
  "${#child_trees[@]} trees ran their probes in child processes"

# The control: with the binfmt_misc entry off, no aarch64 child can start, and a child tree's checks end in ERROR.
name=${child_trees[0]}
mkdir -p "$out/control/x86_64" "$out/control/aarch64"
cp "$out/x86_64/run-$name" "$out/control/x86_64/"
echo 0 > /proc/sys/fs/binfmt_misc/qemu-aarch64
normalized_report qemu-aarch64 "$arm" run --root "$PWD/testdata/hosts/$name" > "$out/control/aarch64/run-$name"
errors=$(verdicts "$out/control/aarch64" | awk -F '\t' '$NF == "error"' | wc -l)
if [ "$errors" -eq 0 ] || diff -q <(verdicts "$out/control/x86_64") <(verdicts "$out/control/aarch64") >/dev/null; then
  echo "FAIL: with no way to start an aarch64 child, $name still gave the same verdicts: no child ran there" >&2
  exit 1
fi
echo "control: without the binfmt_misc entry, $errors checks of $name end in ERROR (their children cannot start)"
