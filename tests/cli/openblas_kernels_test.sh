#!/usr/bin/env bash
# src/sys/openblas_kernels.cpp, seen from outside. Usage: openblas_kernels_test.sh MOCO_DIST OPENBLAS_PROBE
# - Kernels: a moco_dist whose OpenBLAS took this CPU for an unknown one restarts with the kernels
#   for its features: OpenBLAS's own report must not be the generic Prescott ones on a CPU with AVX2.
# - Spinning: a pthreads OpenBLAS with more than one thread runs with OPENBLAS_THREAD_TIMEOUT=16.
# A user's OPENBLAS_CORETYPE or OPENBLAS_THREAD_TIMEOUT is obeyed. Skipped (77) where neither applies
# (another BLAS, or a CPU without AVX2 and an OpenBLAS without its own threads).
set -uo pipefail
binary=$1 probe=$2
checked=0

report=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep '^Core:' | tail -1)
if grep -qw avx2 /proc/cpuinfo && [ -n "$report" ]; then
  echo "kernels with the restart: $report"
  [ "$report" != "Core: Prescott" ] || { echo "FAIL: OpenBLAS runs its generic Prescott kernels on an AVX2 CPU"; exit 1; }
  forced=$(OPENBLAS_CORETYPE=Haswell OPENBLAS_THREAD_TIMEOUT=16 OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep -c '^Core:')
  echo "with OPENBLAS_CORETYPE set: $forced report(s)"
  [ "$forced" -le 1 ] || { echo "FAIL: restarted although the user set OPENBLAS_CORETYPE"; exit 1; }
  checked=1
fi

settings=$(env -u OPENBLAS_THREAD_TIMEOUT OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe")
echo "probe: $settings"
if [[ "$settings" == "parallel 1 threads 2 "* ]]; then
  [ "${settings##* }" = 16 ] || { echo "FAIL: OpenBLAS's threads spin for 2^28 cycles after each call"; exit 1; }
  user=$(OPENBLAS_THREAD_TIMEOUT=28 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe")
  echo "with OPENBLAS_THREAD_TIMEOUT=28 set: $user"
  [ "${user##* }" = 28 ] || { echo "FAIL: the user's OPENBLAS_THREAD_TIMEOUT was overridden"; exit 1; }
  checked=1
fi
[ $checked = 1 ] || { echo "neither an unknown CPU with AVX2 nor a pthreads OpenBLAS: nothing to check"; exit 77; }
