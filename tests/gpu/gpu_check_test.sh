#!/usr/bin/env bash
# tools/gpu_check.sh --self-check: what of the device-day script can be checked without a GPU.
#  - both GPU scripts parse;
#  - the kit's package list matches the build (gpu_kit_test.sh), and PyTorch's MoCo step runs on CPU;
#  - the prerequisite lines: on this machine (no GPU) `--prerequisites DIR` exits 1, says one line
#    per prerequisite, and has already written DIR/gpu_check.json with each of them (results are on
#    disk as soon as known, so a run killed later still returns them);
#  - the missing GPU is named as required, a missing ninja only as optional.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash -n tools/gpu_check.sh
bash -n tools/gpu_kit.sh
tests/gpu/gpu_kit_test.sh

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
rc=0
# This machine's PATH without nvidia-smi, nvcc or ninja, whatever it has.
bin=$dir/bin
mkdir -p "$bin"
IFS=: read -r -a folders <<<"$PATH"
for folder in "${folders[@]}"; do
  for tool in "$folder"/*; do
    name=${tool##*/}
    case $name in nvidia-smi | nvcc | ninja) continue ;; esac
    [ -x "$tool" ] && [ ! -e "$bin/$name" ] && ln -s "$tool" "$bin/$name"
  done
done
PATH=$bin MOCO_GPUKIT=/nonexistent/kit.tar.gz tools/gpu_check.sh --prerequisites "$dir/results" >"$dir/out.txt" 2>&1 || rc=$?
cat "$dir/out.txt"
[ "$rc" -eq 1 ] || { echo "gpu_check_test: --prerequisites without a GPU exited $rc, not 1" >&2; exit 1; }
/usr/bin/python3 - "$dir/results/gpu_check.json" "$dir/out.txt" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
status = {c["name"]: c["status"] for c in results["checks"]}
expected = ["kit", "gpu", "torch_cuda", "nvcc", "cmake", "ninja", "torchvision"]
assert [n.split(":", 1)[1] for n in status] == expected, status
assert status["prerequisite:kit"] == "fail" and status["prerequisite:gpu"] == "fail", status
assert status["prerequisite:cmake"] == "pass", status
assert status["prerequisite:ninja"] == "skipped", status  # optional: Unix Makefiles instead
assert results["all_passed"] is False
for name in expected:
    lines = [l for l in out.splitlines() if f"prerequisite {name}: " in l]
    assert len(lines) == 1, (name, lines)
print(f"gpu_check_test: {len(expected)} prerequisite lines, results on disk before any build: {status}")
PY
