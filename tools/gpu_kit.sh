#!/usr/bin/env bash
# The libraries a GPU machine without a package manager lacks, packed for tools/gpu_check.sh:
# ../shared/gpukit's kit (Open MPI, HDF5, spdlog + fmt, yaml-cpp, CLI11, GoogleTest, protobuf, ...)
# plus what moco_dist needs beyond it: Boost.CRC's headers (TensorBoard's record checksums), only
# the ones boost/crc.hpp includes, not all of Boost.
#
#   tools/gpu_kit.sh [OUTDIR]      (default .gpukit/kit; writes OUTDIR and OUTDIR.tar.gz)
#   tools/gpu_kit.sh --list        what the build needs and which kit file provides each (no download)
#
# MOCO_GPUKIT_MAKER names make_gpu_kit.sh (default ../shared/gpukit/make_gpu_kit.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
maker=${MOCO_GPUKIT_MAKER:-../shared/gpukit/make_gpu_kit.sh}

# find_package or find_library name | the kit's Debian package that provides it (Boost: added here, see above).
# tests/gpu/gpu_kit_test.sh checks this list against CMakeLists.txt and make_gpu_kit.sh.
needs() {
  cat <<'LIST'
spdlog libspdlog-dev
Protobuf libprotobuf-dev
MPI libopenmpi-dev
HDF5 libhdf5-dev
yaml-cpp libyaml-cpp-dev
CLI11 libcli11-dev
nlohmann_json nlohmann-json3-dev
ZLIB zlib1g-dev
GTest libgtest-dev
PNG libpng-dev
turbojpeg libturbojpeg0-dev
Boost boost-crc-headers
LIST
}
if [ "${1:-}" = --list ]; then needs; exit 0; fi

out=$(realpath -m "${1:-.gpukit/kit}")
[ -f "$maker" ] || { echo "gpu_kit: no $maker (set MOCO_GPUKIT_MAKER)" >&2; exit 1; }
bash "$maker" "$out"
echo '#include <boost/crc.hpp>
#include <boost/version.hpp>' | g++ -std=c++17 -x c++ -M - | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u |
  while read -r header; do
    mkdir -p "$out/root$(dirname "$header")"
    cp "$header" "$out/root$header"
  done
echo "gpu_kit: added $(find "$out/root/usr/include/boost" -type f | wc -l) Boost headers" >&2
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | gzip -9 >"$out.tar.gz"
echo "gpu_kit: $out.tar.gz ($(du -h "$out.tar.gz" | cut -f1))" >&2
