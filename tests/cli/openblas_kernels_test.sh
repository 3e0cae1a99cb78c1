#!/usr/bin/env bash
# A moco_dist whose OpenBLAS took this CPU for an unknown one restarts with the kernels for its
# features (src/sys/openblas_kernels.cpp): OpenBLAS's own report of its kernels must not be the
# generic Prescott ones on a CPU with AVX2. Skipped (77) where the BLAS is not OpenBLAS or the CPU
# lacks AVX2; a user's OPENBLAS_CORETYPE must be obeyed.
set -uo pipefail
binary=$1
grep -qw avx2 /proc/cpuinfo || { echo "no AVX2 on this CPU: nothing to check"; exit 77; }
report=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep '^Core:' | tail -1)
[ -n "$report" ] || { echo "no OpenBLAS report (another BLAS): nothing to check"; exit 77; }
echo "with the restart: $report"
[ "$report" != "Core: Prescott" ] || { echo "FAIL: OpenBLAS runs its generic Prescott kernels on an AVX2 CPU"; exit 1; }
forced=$(OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep -c '^Core:')
echo "with OPENBLAS_CORETYPE set: $forced report(s)"
[ "$forced" -le 1 ] || { echo "FAIL: restarted although the user set OPENBLAS_CORETYPE"; exit 1; }
