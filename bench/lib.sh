# Sourced by the batched device sessions (h200-session.sh, merged-session.sh); they set OUT first.
# step NAME COMMAND...: run it, keep its output in $OUT/NAME.txt and its exit code and wall time in
# $OUT/summary.txt, never stop the session.
step() {
  local name=$1; shift; local t0; t0=$(date +%s%N)
  echo "== $name" >&2
  "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  printf '%-28s exit %-3s %6d ms\n' "$name" "$rc" $(( ($(date +%s%N) - t0) / 1000000 )) | tee -a "$OUT/summary.txt" >&2
}
