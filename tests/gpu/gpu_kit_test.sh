#!/usr/bin/env bash
# The parts of tools/gpu_check.sh that need no GPU (it runs them as --self-check):
#  - every package and library the build finds (find_package / find_library ... REQUIRED in the CMake
#    files) is in the kit's list
#    (tools/gpu_kit.sh --list), and every package of that list is one that ../shared/gpukit's
#    make_gpu_kit.sh downloads, or one tools/gpu_kit.sh adds itself;
#  - the PyTorch reference of the GPU benchmark runs its training step on CPU (a smoke test with
#    Debian's torch: the script's logic, not its speed).
set -euo pipefail
cd "$(dirname "$0")/../.."
maker=${MOCO_GPUKIT_MAKER:-../shared/gpukit/make_gpu_kit.sh}
fail=0

listed=$(tools/gpu_kit.sh --list)
needed=$( (grep -ho 'find_package([A-Za-z0-9_-]* [^)]*REQUIRED' CMakeLists.txt tests/CMakeLists.txt |
    sed 's/find_package(\([A-Za-z0-9_-]*\).*/\1/'
  grep -ho 'find_library([A-Za-z0-9_]* [A-Za-z0-9_-]* [^)]*REQUIRED' CMakeLists.txt tests/CMakeLists.txt |
    sed 's/find_library([A-Za-z0-9_]* \([A-Za-z0-9_-]*\).*/\1/') | sort -u)
for package in $needed; do
  case $package in Torch | Threads) continue ;; esac  # python3's torch; the C library
  if ! grep -qx "$package" <<<"$(awk '{print $1}' <<<"$listed")"; then
    echo "gpu_kit_test: the build needs $package, which tools/gpu_kit.sh --list does not name" >&2
    fail=1
  fi
done
echo "gpu_kit_test: every package the build finds is in the kit's list ($(wc -w <<<"$needed") find_package / find_library calls)"

if [ -f "$maker" ]; then
  for deb in $(awk '{print $2}' <<<"$listed"); do
    [ "$deb" = boost-crc-headers ] && continue  # copied by tools/gpu_kit.sh itself
    if ! grep -qw -- "$deb" "$maker"; then
      echo "gpu_kit_test: $deb is not among the packages $maker downloads" >&2
      fail=1
    fi
  done
  echo "gpu_kit_test: every package of the list is downloaded by $maker or added by tools/gpu_kit.sh"
else
  echo "gpu_kit_test: no $maker here: its package list was not checked"
fi

json=$(mktemp)
trap 'rm -f "$json"' EXIT
/usr/bin/python3 bench/moco_step_pytorch.py --device cpu --arch resnet18 --image 32 --batch 8 --queue-size 64 \
  --warmup 1 --steps 2 --json "$json" || fail=1
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["img_per_s"] > 0, r' "$json" || fail=1
exit $fail
