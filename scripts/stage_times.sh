# Stage timing for scripts/test.sh and scripts/proofs.sh (sourced, not run). Each stage appends
# "seconds<TAB>status<TAB>name" to $KEEL_STAGE_TIMES; whoever created that file prints the table
# when it exits, so the table shows the stages done so far even when one fails.
#
#   stage NAME COMMAND...   runs COMMAND (a shell function too, in a subshell under set -e),
#                           records its time and exit status, returns that status

if [ -z "${KEEL_STAGE_TIMES:-}" ]; then
  KEEL_STAGE_TIMES="$(mktemp "${TMPDIR:-/tmp}/keel-stages.XXXXXX")"
  export KEEL_STAGE_TIMES
  _keel_stage_owner=1
  _keel_stage_start=$(date +%s)
  trap 'stage_table; rm -f "$KEEL_STAGE_TIMES"' EXIT
fi

stage() {
  local name="$1" start status
  shift
  # on stderr: a stage's command may send its standard output elsewhere
  printf '\n== %s (%s)\n' "$name" "$(date +%H:%M:%S)" >&2
  start=$(date +%s)
  # Not `"$@" || status=$?`: a function run on the left of || would ignore set -e inside it.
  set +e
  (
    set -e
    "$@"
  )
  status=$?
  set -e
  printf '%s\t%s\t%s\n' "$(($(date +%s) - start))" "$status" "$name" >>"$KEEL_STAGE_TIMES"
  return $status
}

stage_table() {
  [ -n "${_keel_stage_owner:-}" ] || return 0
  local total=$(($(date +%s) - _keel_stage_start))
  echo
  echo "stage times"
  awk -F'\t' '{ printf "  %-34s %6d s  %5.1f min  %s\n", $3, $1, $1 / 60, ($2 == 0 ? "ok" : "FAILED (exit " $2 ")") }' \
    "$KEEL_STAGE_TIMES"
  printf '  %-34s %6d s  %5.1f min\n' "total" "$total" "$(awk -v t="$total" 'BEGIN { printf "%.1f", t / 60 }')"
}
