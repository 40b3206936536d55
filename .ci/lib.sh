# shellcheck shell=bash
# Helpers the stages source: a download cache, quiet installs of what is missing, pinned Python tools in a venv.
# CI_CACHE (default ~/.cache/fabric-preflight-ci) survives between runs where the CI keeps the home directory.
CI_CACHE="${CI_CACHE:-$HOME/.cache/fabric-preflight-ci}"
mkdir -p "$CI_CACHE"

# apt_install PKG..: installs the packages that are not installed yet.
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}"
  apt-get update -qq
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
