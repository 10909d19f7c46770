# shellcheck shell=bash
# checks.sh: the verdict helpers selftest.sh and rma_selftest.sh share.
# The sourcing script sets WORK (a scratch folder) and PASSED=0 FAILED=0,
# and prints "$PASSED passed, $FAILED failed" at the end.

# check NAME WANT_RC CMD...: runs CMD with output in $WORK/NAME.out.
check() {
  local name=$1 want=$2 rc
  shift 2
  "$@" >"$WORK/$name.out" 2>&1
  rc=$?
  if [ "$rc" -eq "$want" ]; then
    PASSED=$((PASSED + 1)); echo "ok   $name"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $name: exit $rc, wanted $want"; tail -5 "$WORK/$name.out"
  fi
}

# expect NAME GREP_ARGS...: the output of check NAME matches.
expect() {
  local name=$1
  shift
  if grep -q "$@" "$WORK/$name.out"; then
    PASSED=$((PASSED + 1)); echo "ok   $name: $*"
  else
    FAILED=$((FAILED + 1)); echo "FAIL $name: no match for $*"
  fi
}
