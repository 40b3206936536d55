#!/usr/bin/env bash
# Fuzzing, briefly (issue 29): the profile loader (with its nesting bound) and the log reader `collective` and
# `nccl` share, FUZZ_SECONDS each (default 20). cargo-fuzz needs a nightly toolchain; both are installed here
# when missing, and a machine that cannot install them fails this stage with the reason instead of skipping it.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() {
  echo "70-fuzz: FAIL: $*" >&2
  exit 1
}

seconds="${FUZZ_SECONDS:-20}"
targets=(profile_load nccl_line)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal ||
    fail "cannot install the nightly toolchain cargo-fuzz needs (no network?)"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked || fail "cannot install cargo-fuzz (no network?)"
fi

# The targets are safe Rust: no sanitizer, which halves the build and finds nothing a panic would not show.
for target in "${targets[@]}"; do
  start=$SECONDS
  # `run` builds the target first; a crash leaves its input under fuzz/artifacts/$target/ and fails the stage.
  cargo +nightly fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" -rss_limit_mb=512 2>&1 |
    tail -n 5 || fail "$target: build failed or crash found (see fuzz/artifacts/$target/)"
  echo "70-fuzz: $target built and fuzzed in $((SECONDS - start)) s"
done
