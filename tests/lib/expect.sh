# Sourced by the shell tests that check exit codes and messages. Needs $work and a fail() function.
# expect CODE TEXT... -- command...: exits CODE, prints every TEXT (fixed strings)
expect() {
  local code=$1 rc=0
  shift
  local texts=()
  while [ "$1" != "--" ]; do texts+=("$1"); shift; done
  shift
  "$@" >"$work/last.out" 2>&1 || rc=$?
  cat "$work/last.out"
  [ "$rc" -eq "$code" ] || fail "expected exit $code, got $rc from: $*"
  for t in "${texts[@]}"; do grep -qF -- "$t" "$work/last.out" || fail "expected '$t' from: $*"; done
  ! grep -q "terminate called" "$work/last.out" || fail "std::terminate reached"
}
