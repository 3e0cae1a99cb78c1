#!/usr/bin/env bash
# src/sys/openblas_kernels.cpp, seen from outside. Usage: openblas_kernels_test.sh MOCO_DIST OPENBLAS_PROBE
# - Kernels: a moco_dist whose OpenBLAS took this CPU for an unknown one restarts with the kernels
#   for its features: OpenBLAS's own report must not be the generic Prescott ones on a CPU with AVX2.
# - Spinning: a pthreads OpenBLAS with more than one thread runs with OPENBLAS_THREAD_TIMEOUT=16.
# A user's OPENBLAS_CORETYPE or OPENBLAS_THREAD_TIMEOUT is obeyed. MOCO_OPENBLAS_SETTINGS=0: no restart,
# no OPENBLAS_* variable set by us, and the line logged at start says so. Skipped (77) where neither
# applies (another BLAS, or a CPU without AVX2 and an OpenBLAS without its own threads).
set -uo pipefail
binary=$1 probe=$2
checked=0

reports=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep '^Core:' || true)
report=$(echo "$reports" | tail -1)
if grep -qw avx2 /proc/cpuinfo && [ -n "$report" ]; then
  echo "kernels with the restart: $report"
  [ "$report" != "Core: Prescott" ] || { echo "FAIL: OpenBLAS runs its generic Prescott kernels on an AVX2 CPU"; exit 1; }
  forced=$(OPENBLAS_CORETYPE=Haswell OPENBLAS_THREAD_TIMEOUT=16 OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep -c '^Core:')
  echo "with OPENBLAS_CORETYPE set: $forced report(s)"
  [ "$forced" -le 1 ] || { echo "FAIL: restarted although the user set OPENBLAS_CORETYPE"; exit 1; }
  off=$(env -u OPENBLAS_CORETYPE MOCO_OPENBLAS_SETTINGS=0 OPENBLAS_VERBOSE=2 "$binary" --help 2>&1 >/dev/null | grep '^Core:')
  echo "with MOCO_OPENBLAS_SETTINGS=0: $off"
  [ "$off" = "$(echo "$reports" | head -1)" ] || { echo "FAIL: MOCO_OPENBLAS_SETTINGS=0 did not leave OpenBLAS's own kernels, once"; exit 1; }
  line=$(env -u OPENBLAS_CORETYPE "$probe" --line)
  echo "logged: $line"
  if [ "$(echo "$reports" | head -1)" = "Core: Prescott" ]; then
    expected="OpenBLAS: kernels ${report#Core: } set by openblas_probe (OpenBLAS took this CPU for an unknown one), "
  else
    expected="OpenBLAS: kernels ${report#Core: } as detected, "
  fi
  [[ "$line" == "$expected"* ]] || { echo "FAIL: the line does not begin with '$expected'"; exit 1; }
  # A restarted process keeps its name (ps, pkill, the multi-host tests find ranks by it).
  comm=$(env -u OPENBLAS_CORETYPE "$probe" --comm)
  echo "process name after the restart: $comm"
  [ "$comm" = openblas_probe ] || { echo "FAIL: the restarted process is called '$comm', not openblas_probe"; exit 1; }
  checked=1
fi

settings=$(env -u OPENBLAS_THREAD_TIMEOUT OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe")
echo "probe: $settings"
if [[ "$settings" == "parallel 1 threads 2 "* ]]; then
  [ "${settings##* }" = 16 ] || { echo "FAIL: OpenBLAS's threads spin for 2^28 cycles after each call"; exit 1; }
  user=$(OPENBLAS_THREAD_TIMEOUT=28 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe")
  echo "with OPENBLAS_THREAD_TIMEOUT=28 set: $user"
  [ "${user##* }" = 28 ] || { echo "FAIL: the user's OPENBLAS_THREAD_TIMEOUT was overridden"; exit 1; }
  line=$(env -u OPENBLAS_THREAD_TIMEOUT OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe" --line)
  echo "logged: $line"
  [[ "$line" == *"thread timeout 2^16 cycles set by openblas_probe (MOCO_OPENBLAS_SETTINGS=0 turns this off)" ]] ||
    { echo "FAIL: the line does not say that the thread timeout was set"; exit 1; }
  checked=1
fi

# Switched off: nothing set, whatever would have been.
off=$(env -u OPENBLAS_THREAD_TIMEOUT -u OPENBLAS_CORETYPE MOCO_OPENBLAS_SETTINGS=0 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$probe")
echo "probe with MOCO_OPENBLAS_SETTINGS=0: $off"
if [ $checked = 1 ]; then
  [[ "$off" == *" coretype unset timeout unset" ]] || { echo "FAIL: MOCO_OPENBLAS_SETTINGS=0 set an OPENBLAS_* variable"; exit 1; }
  line=$(env -u OPENBLAS_THREAD_TIMEOUT -u OPENBLAS_CORETYPE MOCO_OPENBLAS_SETTINGS=0 "$probe" --line)
  echo "logged: $line"
  [[ "$line" == "OpenBLAS: "*", nothing set (MOCO_OPENBLAS_SETTINGS=0)" ]] || { echo "FAIL: the line does not say it was off"; exit 1; }
fi
[ $checked = 1 ] || { echo "neither an unknown CPU with AVX2 nor a pthreads OpenBLAS: nothing to check"; exit 77; }
