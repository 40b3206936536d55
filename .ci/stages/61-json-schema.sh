#!/usr/bin/env bash
# JSON Schemas, against a second, independent validator (Python's jsonschema, the reference implementation;
# the Rust tests use the jsonschema crate): the four schemas are valid draft 2020-12, and the `run` (generic and
# auto profile), `topo`, `nccl` and `isolate` JSON of every recorded tree and NCCL log in the repository validate.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() {
  echo "61-json-schema: FAIL: $*" >&2
  exit 1
}

if ! python3 -c 'import jsonschema' 2>/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3-jsonschema >/dev/null
fi

bin=target/release/fabric-preflight
[ -x "$bin" ] || cargo build --release --locked
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for tree in testdata/hosts/*/; do
  name=$(basename "$tree")
  for profile in generic auto; do
    rc=0
    "$bin" run --root "$tree" --profile "$profile" --format json >"$work/run-$name-$profile.json" 2>"$work/stderr" || rc=$?
    [ "$rc" -ne 2 ] || fail "run --root $tree --profile $profile: usage error: $(cat "$work/stderr")"
  done
  # A tree without a PCI bus has no topology to show (exit 2): nothing to validate.
  "$bin" topo --root "$tree" --format json >"$work/topo-$name.json" 2>/dev/null || rm -f "$work/topo-$name.json"
done
# isolate over 8 stand-in nodes, one bad (tests/isolate/job runs the real collective per group).
FABRIC_PREFLIGHT="$PWD/$bin" ISOLATE_BAD=n5 "$bin" isolate --nodes 'n[1-8]' --work-dir "$work/isolate-groups" \
  --format json -- "$PWD/tests/isolate/job" '{nodes}' '{report}' >"$work/isolate-n8.json" || true
for log in testdata/nccl/*.log; do
  "$bin" nccl --format json "$log" >"$work/nccl-$(basename "$log" .log).json" || true
done

python3 - "$work" <<'PY' || fail "see above"
import glob, json, sys
import jsonschema

work = sys.argv[1]
bad = 0
for kind in ("run", "topo", "nccl", "isolate"):
    with open(f"schemas/{kind}.schema.json") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    files = sorted(glob.glob(f"{work}/{kind}-*.json"))
    if not files:
        print(f"no {kind} report was produced", file=sys.stderr)
        bad += 1
    for path in files:
        with open(path) as f:
            report = json.load(f)
        for error in validator.iter_errors(report):
            bad += 1
            where = "/".join(str(p) for p in error.absolute_path)
            print(f"{path.rsplit('/', 1)[1]}: {error.message} at /{where}", file=sys.stderr)
    print(f"schemas/{kind}.schema.json: {len(files)} reports valid (python-jsonschema)")
sys.exit(1 if bad else 0)
PY
