#!/usr/bin/env bash
# ASan + UBSan check of our code:
#
#   tools/sanitize.sh [BUILD_DIR]
#
# Builds moco_dist, moco_ckpt, moco_lincls and moco_tests with -DMOCO_SANITIZE=address,undefined in BUILD_DIR
# (default build-sanitize/; our code instrumented, LibTorch, HDF5 and OpenMPI as installed), runs
# the ctest suite in it, then a 2-rank training that checkpoints, stops, resumes and finishes.
# Every sanitizer report goes to a file under BUILD_DIR/sanitizer-reports (not only to a stderr that
# a test may swallow); the script fails if any test fails or any report was written, and prints them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$repo/build-sanitize}")
reports=$build/sanitizer-reports

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOCO_SANITIZE=address,undefined \
  -DMOCO_BUILD_BENCH=OFF
cmake --build "$build" --target moco_dist moco_ckpt moco_lincls moco_tests

rm -rf "$reports" && mkdir -p "$reports"
# exitcode: a report exits 97 (ASan) or 98 (UBSan), never 1 or 2, which the bad-input tests expect
#   from our own error paths; log_path: reports land in files the script checks, whatever the test
#   does with the output. detect_leaks stays on, with tools/lsan.supp naming the installed
#   libraries whose own leaks are not ours to fix. Nothing else is relaxed. fast_unwind_on_malloc=0:
#   Open MPI and PMIx are built without frame pointers, so only the slow unwinder records the whole
#   allocation stack that a suppression (and a reader) needs; it doubles the run's time.
export ASAN_OPTIONS="exitcode=97:log_path=$reports/asan:detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="exitcode=98:log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$repo/tools/lsan.supp:print_suppressions=0"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Tests that bound a whole job's wall time allow this many times more (a sanitized step is slower).
export MOCO_TEST_SLOWDOWN=2

status=0
ctest --test-dir "$build" --output-on-failure --timeout 900 || status=1

# Two ranks: a checkpoint at step 2 (the run stops there), then a resume that finishes the run.
run=$build/sanitize_train_np2
rm -rf "$run"
train() {
  mpirun -np 2 --oversubscribe "$build/moco_dist" --config "$repo/tests/fixtures/tiny_synthetic.yaml" \
    train.output_dir="$run" train.threads=1 ckpt.every_steps=2 "$@"
}
if train train.stop_at_step=2 && train && grep -q '"encoder":"trained"' "$run/metrics.jsonl" &&
   "$build/moco_ckpt" verify "$run/checkpoints"; then
  echo "sanitize: 2-rank training with checkpoint and resume finished"
else
  echo "sanitize: 2-rank training FAILED" >&2
  status=1
fi

if compgen -G "$reports/*" > /dev/null; then
  echo "sanitize: sanitizer reports:" >&2
  for f in "$reports"/*; do echo "==== $f" >&2; cat "$f" >&2; done
  status=1
fi
[ $status -eq 0 ] && echo "sanitize: clean (no test failed, no sanitizer report)"
exit $status
