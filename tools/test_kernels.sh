#!/usr/bin/env bash
# The tests under each of OpenBLAS's x86-64 kernel families, so that no float comparison holds only for
# the kernels of the machine it was written on (docs/testing.md, "On any CPU's kernels").
#
#   tools/test_kernels.sh [--cores LIST] [BUILD_DIR] [CTEST_ARGS...]   e.g. tools/test_kernels.sh build -L 'unit|interop|mpi'
#
# --cores Haswell,Prescott: only those runs (a name of the four below), e.g. to run the whole suite
# (-L '') one family at a time.
#
# Runs ctest once with OPENBLAS_CORETYPE unset (OpenBLAS's own pick for this CPU), then =Haswell (AVX2),
# =Sandybridge (AVX) and =Prescott (the SSE3 fallback), each line naming the kernels that really ran
# (the probe's view: moco_dist logs the same line). Exit 1 if any run failed. OPENBLAS_L2_SIZE, which
# some VMs set beside OPENBLAS_CORETYPE, is cleared with it.
set -uo pipefail
cd "$(dirname "$0")/.."
cores=(unset Haswell Sandybridge Prescott)
if [ "${1:-}" = --cores ]; then
  IFS=, read -r -a cores <<<"${2:?--cores needs a list such as Haswell,Prescott}"
  shift 2
  for core in "${cores[@]}"; do
    case $core in unset | Haswell | Sandybridge | Prescott) ;; *) echo "test_kernels.sh: --cores: no family '$core' (unset, Haswell, Sandybridge, Prescott)" >&2; exit 2 ;; esac
  done
fi
build=${1:-build}
shift || true
[ $# -gt 0 ] || set -- -L 'unit|interop|mpi'
probe=$build/tests/openblas_probe
[ -x "$probe" ] || { echo "test_kernels.sh: no $probe: build first" >&2; exit 2; }
failed=0
for core in "${cores[@]}"; do
  if [ $core = unset ]; then env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE); else env=(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=$core); fi
  kernels=$("${env[@]}" "$probe" --line | sed -E 's/^OpenBLAS: kernels ([A-Za-z0-9]+).*/\1/')
  log=$build/test_kernels.$core.log
  start=$SECONDS
  "${env[@]}" ctest --test-dir "$build" -j"$(nproc)" --output-on-failure "$@" >"$log" 2>&1
  rc=$?
  summary=$(grep -E 'tests passed|tests failed' "$log" | tail -n 1)
  echo "OPENBLAS_CORETYPE=$core (kernels $kernels): ${summary:-no summary (rc $rc)}, $((SECONDS - start)) s; $log"
  [ $rc -eq 0 ] || { failed=1; grep -E '^\s+[0-9]+ - ' "$log" | grep -v Skipped; }
done
exit $failed
