#!/usr/bin/env bash
# The test hooks and the workaround switches of src/sys, seen from a moco_dist run. One case per
# ctest entry:   hooks_test.sh CASE BUILD_DIR WORK_DIR
#   workarounds_logged  rank0.log holds one line each for the host-memory settings and OpenBLAS's,
#                       saying what was done and naming the variable that turns it off
#   workarounds_off     MOCO_KEEP_HOST_MEMORY=0 MOCO_OPENBLAS_SETTINGS=0: the lines say nothing was done
#   malformed_hooks     a malformed MOCO_INJECT_NAN or MOCO_CKPT_FAULT ends the run with exit 1,
#                       naming the variable, its value and the expected form
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 30 "$work/console" >&2; exit 1; }
run() {
  "$build/moco_dist" --config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 train.stop_at_step=1 knn.memory_size=64 \
    knn.query_size=32 ckpt.async=false "$@" >"$work/console" 2>&1
}
has() { grep -qF -- "$2" "$1" || fail "no '$2' in $1"; }

case $case_name in
workarounds_logged)
  unset MOCO_KEEP_HOST_MEMORY MOCO_OPENBLAS_SETTINGS GLIBC_TUNABLES MALLOC_MMAP_THRESHOLD_ MALLOC_TRIM_THRESHOLD_ MALLOC_TOP_PAD_
  run train.output_dir="$work/run" || fail "the run failed"
  grep -E 'host memory:|OpenBLAS:' "$work/run/rank0.log" || true
  has "$work/run/rank0.log" "host memory: freed blocks up to 32 MiB kept, LibTorch CPU allocator replaced (MOCO_KEEP_HOST_MEMORY=0 turns this off)"
  grep -Eq '\] OpenBLAS: (kernels .*\(MOCO_OPENBLAS_SETTINGS=0 turns this off\)|not the BLAS here, nothing set)$' \
    "$work/run/rank0.log" || fail "no OpenBLAS line in rank0.log"
  [ "$(grep -c 'host memory:' "$work/run/rank0.log")" = 1 ] || fail "not one host memory line"
  ;;
workarounds_off)
  MOCO_KEEP_HOST_MEMORY=0 MOCO_OPENBLAS_SETTINGS=0 run train.output_dir="$work/run" || fail "the run failed"
  grep -E 'host memory:|OpenBLAS:' "$work/run/rank0.log" || true
  has "$work/run/rank0.log" "host memory: glibc's and LibTorch's defaults (MOCO_KEEP_HOST_MEMORY=0)"
  grep -Eq '\] OpenBLAS: (kernels .*, nothing set \(MOCO_OPENBLAS_SETTINGS=0\)|not the BLAS here, nothing set)$' \
    "$work/run/rank0.log" || fail "no OpenBLAS line saying nothing was set"
  ;;
malformed_hooks)
  rc=0
  MOCO_INJECT_NAN=soon run train.output_dir="$work/nan" || rc=$?
  [ "$rc" = 1 ] || fail "exit $rc with MOCO_INJECT_NAN=soon"
  has "$work/console" "MOCO_INJECT_NAN='soon': expected STEP[:RANK[:queries|keys|loss|grads]]"
  rc=0
  MOCO_CKPT_FAULT=kill_somewhere run train.output_dir="$work/ckpt" || rc=$?
  [ "$rc" = 1 ] || fail "exit $rc with MOCO_CKPT_FAULT=kill_somewhere"
  has "$work/console" "MOCO_CKPT_FAULT='kill_somewhere': expected kill_in_shard|kill_before_manifest|pause_in_shard|pause_before_manifest|pause_before_latest|pause_in_export|pause_before_export_read|pause_in_pack_commit[:RANK][@STEP]"
  ! grep -q "MOCO_CKPT_FAULT: SIGKILL" "$work/console" || fail "a malformed fault fired"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
