#!/usr/bin/env bash
# ctest gpu_check.plan_fits: the GPU day's two device calls fit their 8 minutes each.
#  - `tools/gpu_check.sh --plan` exits 0, and says for each phase a sum of limits of at most 480 s;
#  - every step the script runs (check NAME, prerequisite NAME) has its limit in the plan's table, so
#    no step runs unbounded or outside the sum;
#  - the plan names what each call carries (the kit in the first, nothing in the second) and the
#    machine given back;
#  - with a shorter phase (MOCO_GPU_PHASE_S=300) the same table does not fit: --plan exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
plan=$(tools/gpu_check.sh --plan)
echo "$plan"
fail() {
  echo "gpu_plan_test: $*" >&2
  exit 1
}

for phase in build run; do
  sum=$(sed -n "s/^ *sum ($phase phase) *\([0-9]*\) s .*/\1/p" <<<"$plan")
  [ -n "$sum" ] || fail "the plan states no sum for the $phase phase"
  [ "$sum" -le 480 ] || fail "the $phase phase's limits add up to $sum s, over 480"
  echo "gpu_plan_test: $phase phase: $sum s <= 480 s"
done

# The step names in the plan's tables (indented rows "name  N s  what"), against those the script runs.
listed=$(sed -n 's/^     \([a-z0-9_]*\) *[0-9]* s  .*/\1/p' <<<"$plan" | sort -u)
used=$(grep -oE '^[[:space:]]*(check|prerequisite) [a-z0-9_]+ ' tools/gpu_check.sh | awk '{ print $2 }' | sort -u)
[ -n "$used" ] || fail "found no check or prerequisite calls in tools/gpu_check.sh"
unlisted=$(comm -13 <(echo "$listed") <(echo "$used"))
[ -z "$unlisted" ] || fail "steps without a limit in the plan: $unlisted"
echo "gpu_plan_test: all $(wc -l <<<"$used") steps the script runs have their limit in the plan"

grep -q '"command": "tools/gpu_check.sh build", "carry": \[".gpukit"\]' <<<"$plan" || fail "call 1 does not carry .gpukit"
grep -q '"command": "tools/gpu_check.sh run", "carry": \[\]' <<<"$plan" || fail "call 2 is not the run phase carrying nothing"
grep -q 'give_back' <<<"$plan" || fail "the plan does not give the machine back"

rc=0
MOCO_GPU_PHASE_S=300 tools/gpu_check.sh --plan >/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "--plan with 300 s phases exited $rc, not 1"
echo "gpu_plan_test: with 300 s phases --plan exits 1"
