#!/usr/bin/env bash
# The training step's sources read nothing from the device except through run::read_on_host,
# which HostSyncsTest counts (docs/distributed.md, "Host syncs"): a new .item() or .cpu() in the
# step fails here, unless its line says why with "// host read:" (not in the step: setup, errors).
#   no_hidden_host_reads.sh METHOD_ROOM...   (CMakeLists.txt's MOCO_METHOD_ROOMS: every source of each)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)/src
[ $# -gt 0 ] || { echo "usage: $0 METHOD_ROOM... (src/<room>, as CMakeLists.txt's MOCO_METHOD_ROOMS)" >&2; exit 2; }
step_sources=("$src"/model/*.cpp "$src"/train/*.cpp "$src"/optim/*.cpp "$src"/dist/reducer.cpp "$src"/run/device_batches.cpp)
for room in "$@"; do
  [ -d "$src/$room" ] || { echo "no method room $src/$room" >&2; exit 2; }
  step_sources+=("$src/$room"/*.cpp)
done
hits=$(grep -nE '\.item\b|\.item<|\.cpu\(\)|\.to\(torch::kCPU|\.tolist\(' "${step_sources[@]}" |
  grep -vE 'read_on_host\(|// host read:' || true)
if [ -n "$hits" ]; then
  echo "reads from the device in the step's sources, not through run::read_on_host:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no hidden host reads in ${#step_sources[@]} step source files"
