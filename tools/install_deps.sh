#!/usr/bin/env bash
# Installs everything moco_dist needs to build, test and run on Debian 12.
# Idempotent: when every package is present it prints nothing and touches nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  clang-format                               # tools/format.sh and its ctest entry (clang-format 14)
  shfmt                                      # the launchers' shell parsed (ctest -R style.launch_substitutions_unquoted)
  unzip                                      # tools/build_torch2.sh unpacks PyPI's torch wheel
  libtorch-dev libopenblas0-pthread          # LibTorch 1.13 (CPU); OpenBLAS makes its matmuls ~30x faster
  libopenmpi-dev openmpi-bin                 # bootstrap, CPU collectives, launcher
  libhdf5-dev                                # checkpoints
  libprotobuf-dev protobuf-compiler libboost-dev   # TensorBoard event files (protobuf; Boost.CRC's CRC-32C)
  libspdlog-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libturbojpeg0-dev libpng-dev                # ImageFolder: JPEG (TurboJPEG API) and PNG decoding
  libgtest-dev libgmock-dev
  nftables                                   # packet loss on a test host's link (ctest -R multinode.bad_link)
  slurm-wlm munge                            # the Slurm tests' cluster (tests/lib/slurm_cluster.sh)
  dataset-fashion-mnist                      # real images for the main job
  python3-torch python3-torchvision python3-h5py   # interoperability tests only (/usr/bin/python3)
  python3-venv                               # tools/build_torch2.sh: PyPI's torch in a venv of /usr/bin/python3
  python3-skimage python3-pil                # real photographs and JPEG/PNG writing: the parity test, tools/make_image_folder.py
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The TensorBoard test reads event files with the `tensorboard` package (PyPI), through the python3
# on PATH.
if ! python3 -c "import tensorboard" 2>/dev/null; then
  echo "install_deps: pip install tensorboard (for the TensorBoard test)" >&2
  python3 -m pip install -q tensorboard 2>/dev/null || python3 -m pip install -q --break-system-packages tensorboard
fi

# The function-length check (ctest style.function_length) runs `lizard` (PyPI) through the same python3.
if ! python3 -c "import lizard" 2>/dev/null; then
  echo "install_deps: pip install lizard (for the function-length check)" >&2
  python3 -m pip install -q lizard 2>/dev/null || python3 -m pip install -q --break-system-packages lizard
fi
