#!/usr/bin/env bash
# Builds every target against a CUDA LibTorch 2.x -- PyPI's `torch` wheel for Linux -- with the CUDA
# toolkit at /usr/local/cuda, then runs the tests that need no GPU against that build.
#
#   tools/build_torch2.sh [CACHE_DIR]
#   tools/build_torch2.sh --python [CACHE_DIR]   # only the Python below; prints its path, builds nothing
#
# CACHE_DIR (default $MOCO_TORCH2_CACHE, else ~/.cache/moco_dist/torch2) keeps the wheels and their
# unpacked tree, so a second run downloads and unpacks nothing; and a venv of Debian's /usr/bin/python3
# (its h5py) with the same torch's Python package, MOCO_TORCH2_PYTHON for the tests: the exports load
# with a plain torch.load, weights_only=True by default (ctest interop.torch2_load). Environment:
#   MOCO_TORCH2_VERSION  torch version (default 2.15.0)
#   MOCO_TORCH2_BUILD    build folder (default build-torch2)
#   MOCO_TORCH2_TESTS    ctest -R regex of the tests to run; "all" for all, "none" to only build
#   MOCO_WERROR          ON: compiler warnings in our code are errors (.ci/run sets it)
#                        (default: the tests whose outcome can depend on the LibTorch version, below)
set -euo pipefail
cd "$(dirname "$0")/.."
python_only=false
if [ "${1:-}" = --python ]; then python_only=true; shift; fi

version=${MOCO_TORCH2_VERSION:-2.15.0}
cache=${1:-${MOCO_TORCH2_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/moco_dist/torch2}}
build=${MOCO_TORCH2_BUILD:-build-torch2}
# What can differ between LibTorch versions: every GoogleTest case (the math, the ops, the RNG, the
# pickle format), the collectives on torch tensors, end-to-end training, bitwise resume and the
# torch exports, the linear protocol, the tensor path's parity with torchvision, TensorBoard (LibTorch
# 2.x carries its own protobuf), the NaN skip, the debug invariants, the GPU kit and the build's
# layering. Not repeated: shell behaviour, config parsing, launchers, signals, file systems, test
# hosts, style and docs, whose code paths do not touch LibTorch's API.
version_dependent='^[A-Z]|^mpi[.]np2$|^cli[.]train_tiny|^cli[.]train[.](bn_buffers_np2|world_group_at_one)$'
version_dependent+='|^ckpt[.](resume_bitwise_np2|other_world|tools)$|^lincls[.](cached_np1_np2|resume_bitwise)$'
version_dependent+='|^data[.]augment_parity|^gpu_check[.]|^metrics[.]|^debug[.]|^faults[.]nan_skip$|^build[.]'
version_dependent+='|^ckpt[.]moco_format_|^interop[.]torch2_load$'
tests=${MOCO_TORCH2_TESTS:-$version_dependent}
mkdir -p "$cache/wheels"
cache=$(cd "$cache" && pwd)
wheels=$cache/wheels
root=$cache/torch-$version   # laid out like site-packages: torch/ beside nvidia/
t0=$SECONDS
say() { echo "build_torch2: [$((SECONDS - t0))s] $*" >&2; }

fetch() {  # fetch REQUIREMENT: download one wheel, without its dependencies, unless already there
  python3 -m pip download --quiet --no-deps --dest "$wheels" "$1"
}
# requirement NAME WHEEL [EXTRA]: NAME's pinned requirement in WHEEL's METADATA (Linux, x86_64; the
# ones of EXTRA, else the unconditional ones), e.g. "nvidia-nccl-cu13==2.30.7".
requirement() {
  unzip -p "$2" '*.dist-info/METADATA' | python3 -c '
import re, sys
name, extra = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    if not line.startswith("Requires-Dist:"):
        continue
    req, _, marker = line[len("Requires-Dist:"):].strip().partition(";")
    m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*\(?\s*(==\s*[^;)\s]+)", req)
    if not m or m.group(1).lower() != name:
        continue
    wants_extra = re.search(r"extra\s*==\s*[\x27\"]([^\x27\"]+)", marker)
    if (wants_extra.group(1) if wants_extra else "") != extra:
        continue
    if "win32" in marker and "linux" not in marker:
        continue
    print(m.group(1) + m.group(3).replace(" ", ""))
    sys.exit(0)
sys.exit("no pinned requirement %s%s" % (name, " [extra " + extra + "]" if extra else ""))
' "$1" "${3:-}"
}
one_wheel() {  # one_wheel GLOB: the single downloaded wheel matching GLOB
  local found=("$wheels"/$1)
  [ -e "${found[0]}" ] || { echo "build_torch2: no wheel $1 in $wheels" >&2; exit 1; }
  echo "${found[0]}"
}

if [ ! -e "$root/.complete" ]; then
  say "downloading torch $version and the NVIDIA wheels it pins into $wheels"
  fetch "torch==$version"
  torch_whl=$(one_wheel "torch-$version-*.whl")
  # libtorch_cuda needs these beside the CUDA toolkit's own libraries (cudart, cuBLAS, cuDNN, ...,
  # which come from /usr/local/cuda): NCCL must be torch's (it needs symbols a toolkit's older NCCL
  # lacks, and a process loads one), cuSPARSELt, NVSHMEM and cuFile are not in the toolkit.
  reqs=()
  for name in nvidia-nccl-cu13 nvidia-cusparselt-cu13 nvidia-nvshmem-cu13; do
    reqs+=("$(requirement "$name" "$torch_whl")")
  done
  toolkit=$(requirement cuda-toolkit "$torch_whl")
  fetch "$toolkit"
  reqs+=("$(requirement nvidia-cufile "$(one_wheel "cuda_toolkit-${toolkit#*==}-*.whl")" cufile)")
  for r in "${reqs[@]}"; do fetch "$r"; done
  say "unpacking into $root (${reqs[*]})"
  rm -rf "$root.partial" && mkdir -p "$root.partial"
  unzip -q "$torch_whl" 'torch/lib/*' 'torch/include/*' 'torch/share/*' -x 'torch/lib/libtorch_python.so' \
    -d "$root.partial"
  for r in "${reqs[@]}"; do
    n=${r%%==*}; v=${r#*==}; v=${v%.\*}
    unzip -q -o "$(one_wheel "${n//-/_}-$v*.whl")" 'nvidia/*' -d "$root.partial"
  done
  rm -rf "$root" && mv "$root.partial" "$root" && touch "$root/.complete"
fi

# The torch.load check's Python: /usr/bin/python3 (Debian's h5py and numpy) in a venv that holds the
# wheel's torch package and its pure-Python requirements (those for every platform: filelock, sympy,
# ...), the NVIDIA libraries linked in from $root/nvidia as the wheels would install them.
venv=$cache/venv-$version
if [ ! -e "$venv/.complete" ]; then
  say "making $venv: torch $version's Python package beside Debian's h5py"
  torch_whl=$(one_wheel "torch-$version-*.whl")
  rm -rf "$venv" && /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --quiet --no-deps "$torch_whl" >&2
  mapfile -t pure < <(unzip -p "$torch_whl" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: \([^;]*\)$/\1/p')
  "$venv/bin/python" -m pip install --quiet --no-warn-conflicts "${pure[@]}" >&2
  ln -s "$root/nvidia" "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia"
  touch "$venv/.complete"
fi
export MOCO_TORCH2_PYTHON=$venv/bin/python
if $python_only; then
  echo "$MOCO_TORCH2_PYTHON"
  exit 0
fi

say "configuring $build against $root/torch"
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root/torch" \
  -DMOCO_WITH_CUDA=ON -DMOCO_WITH_NCCL=ON -DMOCO_WERROR="${MOCO_WERROR:-OFF}" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; exit 1; }
grep 'moco_dist:' "$build/configure.log" >&2
say "building every target"
cmake --build "$build"
say "built"

[ "$tests" = none ] && exit 0
# Without a GPU the CUDA libraries still load (torch::cuda::is_available() is then false, and the
# tests that need a device skip, saying so); a binary that does not start is a broken build.
"$build/moco_dist" --help >/dev/null || { echo "build_torch2: $build/moco_dist does not start" >&2; exit 1; }
say "running the tests ($tests)"
jobs=$(nproc)
if [ "$tests" = all ]; then
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
else
  ctest --test-dir "$build" --output-on-failure -j "$jobs" -R "$tests"
fi
say "done"
