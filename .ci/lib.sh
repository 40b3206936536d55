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
