#!/usr/bin/env bash
# The one command for the day a GPU machine is lent (no internet, no apt: the device tool's H200).
# Checks its prerequisites (one line each), builds moco_dist against python3's CUDA LibTorch with
# the libraries of tools/gpu_kit.sh's kit, then runs, each bounded in time:
#   1. the GPU tests: NCCL single-rank collectives, device dispatch, CUDA streams (ctest);
#   2. the trainer on cuda:0: 20 steps in fp32, then in bf16 + channels-last;
#   3. a world of one through the NCCL group (dist.world_group_at_one): CUDA reducer hooks, the CUDA
#      key shuffle and the dispatch group;
#   4. stop and resume on the device: SIGUSR1 mid-run (a checkpoint), the same command resumed to
#      step 30, `moco_ckpt verify` of the run's checkpoints;
#   5. the debug mode (configs/debug.yaml: invariants every step);
#   6. bench_gpu (ResNet-50 MoCo v2, bf16, channels-last) beside bench/moco_step_pytorch.py.
# Meant to finish in under 8 minutes on one H200.
#
#   tools/gpu_check.sh [RESULTS_DIR]     (default $OUT if set, else gpu_check_results)
#   tools/gpu_check.sh --prerequisites [RESULTS_DIR]   only the prerequisite lines (exit 1 if one is missing)
#   tools/gpu_check.sh --self-check      what CI checks without a GPU (tests/gpu/gpu_check_test.sh)
#
# Results are written as they are known, so a run killed at any point returns what it did:
# RESULTS_DIR/gpu_check.json (rewritten after every check: status, seconds, last lines, figures),
# RESULTS_DIR/gpu_check.log (progress, and the last 40 lines of each failed check). Three files in
# all, within the device tool's limit of 8. Environment: MOCO_GPUKIT (the kit tarball, default
# .gpukit/kit.tar.gz), MOCO_GPU_BUILD (build folder, default build-gpu), MOCO_BENCH_BATCH (default
# 256), MOCO_BENCH_STEPS (default 30).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --self-check ]; then
  exec tests/gpu/gpu_check_test.sh
fi
only_prerequisites=false
if [ "${1:-}" = --prerequisites ]; then only_prerequisites=true; shift; fi

results=${1:-${OUT:-gpu_check_results}}
mkdir -p "$results" && results=$(cd "$results" && pwd) || exit 1
kit=${MOCO_GPUKIT:-.gpukit/kit.tar.gz}
build=${MOCO_GPU_BUILD:-build-gpu}
batch=${MOCO_BENCH_BATCH:-256}
bench_steps=${MOCO_BENCH_STEPS:-30}
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
# The checks' logs, runs and figures: gone however the script ends (signals end it through exit).
trap 'rm -rf "$work"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
records=$results/gpu_check.tsv   # name, status, seconds, detail
log=$results/gpu_check.log
: >"$records"
: >"$log"
t0=$SECONDS
say() { echo "gpu_check: [$((SECONDS - t0))s] $*" | tee -a "$log" >&2; }

# The JSON from the records so far (no torch import: it runs after every check).
write_results() {
  python3 - "$records" "$results/gpu_check.json" "$work" <<'PY'
import json, os, sys
records, results, work = sys.argv[1:4]
out = {"checks": [], "facts": {}}
for line in open(records):
    name, status, seconds, detail = line.rstrip("\n").split("\t", 3)
    out["checks"].append({"name": name, "status": status, "seconds": int(seconds), "last_lines": detail})
for name in ("facts", "bench_gpu", "bench_pytorch"):
    path = os.path.join(work, name + ".json")
    if os.path.exists(path):
        out[name] = json.load(open(path))
if "img_per_s" in out.get("bench_gpu", {}) and "img_per_s" in out.get("bench_pytorch", {}):
    out["bench_ratio"] = out["bench_gpu"]["img_per_s"] / out["bench_pytorch"]["img_per_s"]
out["all_passed"] = all(c["status"] in ("pass", "skipped") for c in out["checks"])
json.dump(out, open(results + ".tmp", "w"), indent=2)
os.replace(results + ".tmp", results)
PY
}

# record NAME STATUS SECONDS DETAIL: one result, on disk at once.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(tr '\t\n' '  ' <<<"$4" | cut -c1-400)" >>"$records"
  write_results
}

# check NAME SECONDS CMD...: runs CMD for at most SECONDS with its output in $work/NAME.log. timeout
# runs programs, not shell functions: CMD runs in a child bash, where the exported functions are defined.
check() {
  local name=$1 limit=$2 start=$SECONDS status=pass
  shift 2
  say "$name: $*"
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" >"$work/$name.log" 2>&1 || status=fail
  [ $status = fail ] && { echo "---- $name: last lines" && tail -n 40 "$work/$name.log"; } >>"$log"
  record "$name" "$status" "$((SECONDS - start))" "$(tail -n 3 "$work/$name.log")"
  say "$name: $status ($((SECONDS - start)) s)"
  [ "$status" = pass ]
}

# prerequisite NAME REQUIRED|OPTIONAL HINT CMD...: one line saying what was found (CMD's first
# line of output) or what is missing and what that costs.
missing=0
prerequisite() {
  local name=$1 need=$2 hint=$3 found
  shift 3
  if found=$("$@" 2>&1 | head -n 1) && [ -n "$found" ]; then
    say "prerequisite $name: ok ($found)"
    record "prerequisite:$name" pass 0 "$found"
  else
    say "prerequisite $name: MISSING ($hint)"
    record "prerequisite:$name" "$([ "$need" = REQUIRED ] && echo fail || echo skipped)" 0 "missing: $hint"
    [ "$need" = REQUIRED ] && missing=$((missing + 1))
  fi
  return 0
}
torch_cuda() { python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device"; print(torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'; }
torchvision_version() { python3 -c 'import torchvision; print(torchvision.__version__)'; }
ninja_version() { command -v ninja >/dev/null && echo "ninja $(ninja --version)"; }

prerequisite kit REQUIRED "no $kit: make it with tools/gpu_kit.sh where apt works and carry .gpukit" ls "$kit"
[ -f "$kit" ] && tar -C "$work" -xzf "$kit" && for env in "$work"/*/env.sh; do source "$env"; done
prerequisite gpu REQUIRED "nvidia-smi lists no GPU" nvidia-smi -L
prerequisite torch_cuda REQUIRED "python3's torch must see a CUDA device: the build uses its LibTorch" torch_cuda
prerequisite nvcc REQUIRED "CUDA's compiler, for CMake's CUDA toolkit" nvcc --version
prerequisite cmake REQUIRED "CMake 3.18 or later" cmake --version
prerequisite ninja OPTIONAL "builds with Unix Makefiles instead" ninja_version
prerequisite torchvision OPTIONAL "bench_pytorch (PyTorch's MoCo step) is skipped" torchvision_version
if [ "$missing" -gt 0 ] || $only_prerequisites; then
  say "$missing required prerequisite(s) missing"
  [ "$missing" -eq 0 ]
  exit
fi
python3 -c 'import json, subprocess, sys, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
json.dump({"gpu": smi, "torch": torch.__version__, "cuda": torch.version.cuda}, open(sys.argv[1], "w"))' "$work/facts.json"

torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
generator=(-G Ninja)
command -v ninja >/dev/null || generator=(-G "Unix Makefiles")
check configure 120 cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMOCO_WITH_CUDA=ON -DMOCO_WITH_NCCL=ON \
  "-DCMAKE_PREFIX_PATH=$torch_prefix;${CMAKE_PREFIX_PATH:-}" || exit 1
check build 360 cmake --build "$build" -j "$(nproc)" || exit 1

check gpu_tests 120 ctest --test-dir "$build" --output-on-failure --timeout 60 -R 'Nccl|Dispatch|Cuda|Gpu|Precision|Contrastive'

export build run_dir=$work/runs
train() {  # train NAME OVERRIDES...: a short run of the tests' tiny synthetic config on cuda:0
  local name=$1
  shift
  "$build/moco_dist" --config tests/data/tiny_synthetic.yaml train.epochs=4 "train.output_dir=$run_dir/$name" "$@" &&
    grep -q "device cuda:0" "$run_dir/$name/rank0.log"
}
export -f train
check train_fp32 60 train fp32 train.stop_at_step=20
check train_bf16_channels_last 60 train bf16 train.precision=bf16 train.channels_last=true train.stop_at_step=20
world_of_one_nccl() {
  train nccl1 dist.world_group_at_one=true train.stop_at_step=20 &&
    grep -q "collectives: MPI, NCCL for CUDA tensors across 1 rank" "$run_dir/nccl1/rank0.log"
}
export -f world_of_one_nccl
check world_of_one_nccl 90 world_of_one_nccl
# No host sync inside a step that does not report (docs/distributed.md, "Host syncs"), through the
# NCCL group, the CUDA reducer hooks and the CUDA shuffle: LibTorch's sync debug mode makes any an error.
check no_host_sync_in_step 90 train nosync dist.world_group_at_one=true debug.check_step_syncs=true \
  dist.queue_check_every=0 train.log_every=10 train.stop_at_step=30
stop_resume_verify() {  # SIGUSR1 mid-run, resumed to step 30, every checkpoint verified
  local out=$run_dir/stop
  "$build/moco_dist" --config tests/data/tiny_synthetic.yaml train.epochs=1000 "train.output_dir=$out" &
  local pid=$!
  until grep -Eq '"step":5[,}]' "$out/metrics.jsonl" 2>/dev/null; do kill -0 $pid 2>/dev/null || return 1; sleep 0.2; done
  kill -USR1 $pid && wait $pid && grep -q '"event":"preempted"' "$out/metrics.jsonl" &&
    "$build/moco_dist" --config tests/data/tiny_synthetic.yaml train.epochs=4 "train.output_dir=$out" train.stop_at_step=30 &&
    grep -q '"event":"resume"' "$out/metrics.jsonl" && grep -Eq '"step":30[,}]' "$out/metrics.jsonl" &&
    "$build/moco_ckpt" verify "$out"
}
export -f stop_resume_verify
check stop_resume_verify 120 stop_resume_verify
check debug_mode 60 "$build/moco_dist" --config configs/debug.yaml "train.output_dir=$run_dir/debug" train.stop_at_step=8

check bench_gpu 120 "$build/bench_gpu" --batch "$batch" --steps "$bench_steps" --json "$work/bench_gpu.json"
if torchvision_version >/dev/null 2>&1; then
  check bench_pytorch 120 python3 bench/moco_step_pytorch.py --batch "$batch" --steps "$bench_steps" --json "$work/bench_pytorch.json"
fi
say "done: $(grep -c $'\tpass\t' "$records") passed, $(grep -c $'\tfail\t' "$records") failed; $results/gpu_check.json"
