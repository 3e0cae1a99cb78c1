#!/usr/bin/env bash
# One command for a machine with a GPU, no internet and no apt (the device tool's machine): builds
# moco_dist against python3's CUDA LibTorch with the libraries from tools/gpu_kit.sh's kit, then
#   1. the GPU tests: NCCL single-rank collectives, device dispatch, CUDA streams (ctest);
#   2. the trainer on cuda:0: a few steps in fp32, then in bf16 + channels-last;
#   3. a checkpoint written from the device and resumed from (the run continues from its step);
#   4. the debug mode (configs/debug.yaml: invariants every step) on the device;
#   5. bench_gpu (ResNet-50 MoCo v2, bf16, channels-last) beside bench/moco_step_pytorch.py;
# and writes every result to one JSON file. Meant to finish in under 8 minutes.
#
#   tools/gpu_check.sh [RESULTS_JSON]     (default $OUT/gpu_check.json if $OUT is set, else gpu_check.json)
#   tools/gpu_check.sh --self-check       what CI can check without a GPU: this script's syntax, the
#                                         kit's list against the build, the PyTorch script on CPU
#
# Environment: MOCO_GPUKIT (the kit tarball, default .gpukit/kit.tar.gz), MOCO_GPU_BUILD (build
# folder, default build-gpu), MOCO_BENCH_BATCH (default 256), MOCO_BENCH_STEPS (default 30).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --self-check ]; then
  set -e
  bash -n tools/gpu_check.sh
  bash -n tools/gpu_kit.sh
  tests/gpu/gpu_kit_test.sh
  exit 0
fi

results=${1:-${OUT:+$OUT/}gpu_check.json}
kit=${MOCO_GPUKIT:-.gpukit/kit.tar.gz}
build=${MOCO_GPU_BUILD:-build-gpu}
batch=${MOCO_BENCH_BATCH:-256}
bench_steps=${MOCO_BENCH_STEPS:-30}
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
records=$work/records.tsv   # name, status, seconds, detail
: >"$records"
t0=$SECONDS
say() { echo "gpu_check: [$((SECONDS - t0))s] $*" >&2; }

# check NAME CMD...: runs CMD with its output in $work/NAME.log, records pass/fail and its time.
check() {
  local name=$1 start=$SECONDS status=pass
  shift
  say "$name: $*"
  "$@" >"$work/$name.log" 2>&1 || status=fail
  local detail
  detail=$(tail -n 3 "$work/$name.log" | tr '\t\n' '  ' | cut -c1-400)
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$detail" >>"$records"
  say "$name: $status ($((SECONDS - start)) s)"
  [ "$status" = pass ]
}

write_results() {
  python3 - "$records" "$results" "$work" <<'PY'
import json, os, subprocess, sys
records, results, work = sys.argv[1:4]
out = {"checks": [], "facts": {}}
for line in open(records):
    name, status, seconds, detail = line.rstrip("\n").split("\t", 3)
    out["checks"].append({"name": name, "status": status, "seconds": int(seconds), "last_lines": detail})
for name in ("bench_gpu", "bench_pytorch"):
    path = os.path.join(work, name + ".json")
    if os.path.exists(path):
        out[name] = json.load(open(path))
if "bench_gpu" in out and "bench_pytorch" in out:
    out["bench_ratio"] = out["bench_gpu"]["img_per_s"] / out["bench_pytorch"]["img_per_s"]
try:
    out["facts"]["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                         capture_output=True, text=True).stdout.strip()
except OSError:
    out["facts"]["gpu"] = "no nvidia-smi"
import torch
out["facts"]["torch"] = torch.__version__
out["facts"]["cuda"] = torch.version.cuda
out["all_passed"] = all(c["status"] == "pass" for c in out["checks"])
json.dump(out, open(results, "w"), indent=2)
print(json.dumps({k: out[k] for k in out if k not in ("checks",)}, indent=2))
for c in out["checks"]:
    print("%-22s %-4s %4d s" % (c["name"], c["status"], c["seconds"]))
PY
}
trap write_results EXIT

# The kit's libraries, and python3's CUDA LibTorch for CMake.
[ -f "$kit" ] || { echo "gpu_check: no kit at $kit: make it with tools/gpu_kit.sh where apt works and carry .gpukit" >&2; exit 1; }
tar -C "$work" -xzf "$kit"
# shellcheck disable=SC1090
source "$work"/*/env.sh
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')

check configure cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOCO_WITH_CUDA=ON -DMOCO_WITH_NCCL=ON \
  "-DCMAKE_PREFIX_PATH=$torch_prefix;${CMAKE_PREFIX_PATH:-}" || exit 1
check build cmake --build "$build" -j "$(nproc)" || exit 1

check gpu_tests ctest --test-dir "$build" --output-on-failure --timeout 120 -R 'Nccl|Dispatch|Cuda|Gpu|Precision|Contrastive'

run_dir=$work/runs
train() {  # train NAME OVERRIDES...: a short run of the tests' tiny synthetic config on cuda:0
  local name=$1
  shift
  "$build/moco_dist" --config tests/data/tiny_synthetic.yaml "train.output_dir=$run_dir/$name" train.epochs=4 "$@" &&
    grep -q "on cuda:0" "$run_dir/$name/rank0.log"
}
check train_fp32 train fp32 train.stop_at_step=20
check train_bf16_channels_last train bf16 train.precision=bf16 train.channels_last=true train.stop_at_step=20
resume() {  # the fp32 run, resumed from its step-20 checkpoint, runs on to step 30
  "$build/moco_dist" --config tests/data/tiny_synthetic.yaml "train.output_dir=$run_dir/fp32" train.epochs=4 train.stop_at_step=30 &&
    grep -q '"event":"resume"' "$run_dir/fp32/metrics.jsonl" && grep -q '"step":30' "$run_dir/fp32/metrics.jsonl"
}
check checkpoint_resume resume
check debug_mode "$build/moco_dist" --config configs/debug.yaml "train.output_dir=$run_dir/debug" train.stop_at_step=8

check bench_gpu "$build/bench_gpu" --batch "$batch" --steps "$bench_steps" --json "$work/bench_gpu.json"
check bench_pytorch python3 bench/moco_step_pytorch.py --batch "$batch" --steps "$bench_steps" --json "$work/bench_pytorch.json"
say "done"
