#!/usr/bin/env bash
# The GPU day (issue 41): one H200 lent for 15 minutes of device time in all (its start included), at
# most 10 minutes a command, on a fresh machine that keeps nothing and reaches no network. The work
# is two device calls of at most 8 minutes each, made back to back on the same warm machine:
#
#   tools/gpu_check.sh build [RESULTS_DIR]  prerequisites (one line each), the kit unpacked into the
#       build folder, configure against python3's CUDA LibTorch, then only the targets the run phase
#       uses (moco_dist moco_ckpt moco_tests bench_gpu) with all cores;
#   tools/gpu_check.sh run [RESULTS_DIR]    the checks, on the build folder the build call left:
#       1. the GPU tests with TF32 off: NCCL single-rank collectives, device dispatch (ctest);
#       2. the trainer on cuda:0: 20 steps in fp32, then in bf16 + channels-last;
#       3. a world of one through the NCCL group (dist.world_group_at_one), which runs the collectives
#          of several ranks: the reducer's CUDA hooks and bucket all-reduces (its metrics.jsonl must
#          show the gradient bytes reduced), the per-step BN broadcast, the key shuffle's all-to-all,
#          the dispatch group; the same with LibTorch's sync debug mode;
#       4. stop and resume on the device: SIGUSR1 mid-run (a checkpoint), the same command resumed
#          to step 30, `moco_ckpt verify` of the run's checkpoints;
#       5. the debug mode (configs/debug.yaml: invariants every step);
#       6. bench_gpu (ResNet-50 MoCo v2, bf16, channels-last) beside bench/moco_step_pytorch.py, and
#          bench_gpu --mode trainer: the trainer's step (reducer, skip, BN broadcast through NCCL at
#          world size 1) at 32 images against the model's step alone.
#   tools/gpu_check.sh --plan               the device-tool calls in order, what each carries, every
#       step's limit and each phase's sum (exit 1 if a sum passes the phase's 480 s)
#   tools/gpu_check.sh --prerequisites [RESULTS_DIR]   the build phase's prerequisite lines only
#   tools/gpu_check.sh --self-check         what CI checks without a GPU (tests/gpu/gpu_check_test.sh)
#
# Every step runs under its limit from steps() below, and a phase stops at MOCO_GPU_PHASE_S (default
# and most 480 s): a step that no longer fits is recorded as no_time, not killed half-way by the
# device tool. Results are written as they are known, so a call killed at any point returns what it
# did: RESULTS_DIR (default $OUT if set, else gpu_check_results) gets gpu_check.json (rewritten
# through a temporary file and a rename after every step, so valid JSON at every moment),
# gpu_check.tsv (a line a step) and gpu_check.log (progress, and the last 40 lines of each failed
# step): three files, within the device tool's 8. The run phase's files hold the build phase's steps
# too. Exit status: 0 when every step of the phase passed or was skipped as optional (all_passed in
# the JSON: the same over both phases, and both ended rather than killed).
# Environment: MOCO_GPUKIT (the kit tarball, default .gpukit/kit.tar.gz), MOCO_GPU_BUILD (build
# folder, default build-gpu), MOCO_GPU_PHASE_S, MOCO_BENCH_BATCH (default 256), MOCO_BENCH_STEPS
# (default 30).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

readonly phase_max_s=480
phase_s=${MOCO_GPU_PHASE_S:-$phase_max_s}
[ "$phase_s" -le "$phase_max_s" ] 2>/dev/null || phase_s=$phase_max_s
# What the run phase uses, and all that the build phase makes: a whole build (the other tests' tools,
# four more benchmarks) is most of 8 minutes.
readonly targets=(moco_dist moco_ckpt moco_tests bench_gpu)
# The GPU tests: the suites that touch CUDA or NCCL, or whose figures change with the device.
readonly gpu_tests_regex='Nccl|Dispatch|Cuda|Gpu|Precision|Contrastive'

# phase, step, limit in seconds, what: every step of both phases, in order, with the longest it may
# take on the H200's 16 cores. prerequisite and check take their limit from here (a name missing
# stops the script) and --plan prints and sums it, so the plan is what runs. The limits are
# estimates, not measurements (no session has had a GPU yet): the build from the 2-core machine's
# ninja log (each unity object 20-47 s, the precompiled torch header first, about 35 objects for
# these targets) spread over 16 cores, the checks from the tiny configs at two to three times what
# they should take. The first GPU day's JSON gives each step's seconds beside its limit: set them
# from those.
steps() {
  cat <<'TABLE'
build kit              10 the kit tarball, unpacked into BUILD/gpukit (the run phase loads its libraries from there)
build gpu              10 nvidia-smi lists a GPU
build torch_cuda       60 python3's torch sees it; this one import also records its version, CUDA, C++ ABI, NCCL, the TF32 probe
build torchvision       2 for bench_pytorch (recorded by that import)
build nvcc              5 CUDA's compiler, for CMake's CUDA toolkit
build nvcc_cuda_major   2 nvcc's CUDA major = torch.version.cuda's
build cxx11_abi         5 torch's _GLIBCXX_USE_CXX11_ABI = the kit's libraries' (Debian's: 1; torch wheels up to 2.6: 0)
build tf32_off          2 NVIDIA_TF32_OVERRIDE=0 (set for gpu_tests) makes an fp32 matmul full fp32 even with torch's allow_tf32
build cmake             5 CMake 3.18 or later
build ninja             2 else Unix Makefiles
build configure        80 cmake -DMOCO_WITH_CUDA=ON -DMOCO_WITH_NCCL=ON against torch's LibTorch and the kit
build nccl_headers      2 the nccl.h the build compiled against = the libnccl torch loads
build build           280 only moco_dist moco_ckpt moco_tests bench_gpu, -j$(nproc)
run   build_present     2 BUILD holds the build call's targets and kit: the same warm machine
run   gpu              10 nvidia-smi lists a GPU
run   gpu_tests        60 ctest -j 8 of the GPU tests, NVIDIA_TF32_OVERRIDE=0: their GPU results meet CPU tensors
run   train_fp32       35 20 trainer steps on cuda:0, fp32
run   train_bf16_channels_last 35 20 trainer steps on cuda:0, bf16 + channels-last
run   world_of_one_nccl 40 20 steps through the MPI/NCCL group at world size 1: reducer hooks and buckets, BN broadcast, all-to-all
run   no_host_sync_in_step 40 30 steps with LibTorch's sync debug mode: no host sync inside a step
run   stop_resume_verify 70 SIGUSR1 after step 5, resumed to step 30, moco_ckpt verify
run   debug_mode       35 configs/debug.yaml for 8 steps, invariants every step
run   bench_gpu        60 ResNet-50 MoCo v2 step, bf16, channels-last, batch MOCO_BENCH_BATCH
run   bench_pytorch    60 the same step the official way (bench/moco_step_pytorch.py)
run   bench_gpu_trainer 30 the trainer's step (reducer, skip, BN broadcast via NCCL at world 1), 32 images, against the model's
TABLE
}

# limit_of PHASE STEP: the step's limit from the table; exits 2 for a step it does not list.
limit_of() {
  steps | awk -v p="$1" -v n="$2" '$1 == p && $2 == n { print $3; found = 1 } END { exit !found }' ||
    { echo "gpu_check: no step $1/$2 in steps(): give it a limit there" >&2; exit 2; }
}

# ---------------------------------------------------------------------------------------- --plan
# plan_phase PHASE: the phase's steps with their limits and its sum; returns 1 if the sum passes phase_s.
plan_phase() {
  local sum
  steps | awk -v p="$1" -v b="${MOCO_GPU_BUILD:-build-gpu}" '$1 == p { gsub(/BUILD/, b); w = $4; for (i = 5; i <= NF; i++) w = w " " $i; printf "     %-26s %4d s  %s\n", $2, $3, w }'
  sum=$(steps | awk -v p="$1" '$1 == p { s += $3 } END { print s }')
  if [ "$sum" -le "$phase_s" ]; then
    printf '     %-26s %4d s  <= %d s: fits\n' "sum ($1 phase)" "$sum" "$phase_s"
  else
    printf '     %-26s %4d s  > %d s: DOES NOT FIT\n' "sum ($1 phase)" "$sum" "$phase_s"
    return 1
  fi
}

plan() {
  local call_s=$((phase_s + 60)) fits=0 kit=${MOCO_GPUKIT:-.gpukit/kit.tar.gz} build=${MOCO_GPU_BUILD:-build-gpu}
  cat <<EOF
The GPU day: one H200, 15 minutes of device time in all (the machine's start included), at most 10
minutes a command, a fresh machine that keeps nothing. Two device calls of at most $phase_s s each,
back to back on one warm machine.

0. Here, before: tools/gpu_kit.sh -> $kit (about 10 MB, git-ignored), then device status:
   can_start_another must be true.
1. device run {"command": "tools/gpu_check.sh build", "carry": [".gpukit"], "timeout_s": $call_s}
   Carry .gpukit: the libraries the machine lacks (the build links them, the run loads them).
EOF
  plan_phase build || fits=1
  cat <<EOF
2. device run {"command": "tools/gpu_check.sh run", "carry": [], "timeout_s": $call_s}
   AT ONCE when call 1 returns, before reading its results: a machine stays warm 30 s after a call,
   and only that machine still has $build/ (ignored build outputs are kept between calls on a warm
   machine; a fresh one starts bare). Carry nothing: $build/ cannot travel (its precompiled torch
   header alone is about 570 MB, the device tool carries 64 MiB), .gpukit need not (its libraries
   are unpacked in $build/gpukit). Skip call 2 if call 1's rc is not 0. If call 2 says
   build_present failed, the machine went back between the calls: the budget left does not hold
   both calls again; give it back.
EOF
  plan_phase run || fits=1
  cat <<EOF
3. device give_back {} (unless you rerun at once).

Device time: the start (a minute or more) + call 1 (<= $phase_s s) + call 2 (<= $phase_s s). The limits
are worst cases and together pass the 15 minutes; the device tool cuts a call at the budget left.
If call 1's reply says lease.budget_left_s < $call_s, run call 2 as
"MOCO_GPU_PHASE_S=<budget_left_s - 60> tools/gpu_check.sh run": the steps that no longer fit are
then recorded as no_time instead of the call being killed.
Results: each call's \$OUT gets gpu_check.json, gpu_check.tsv, gpu_check.log (3 of the 8 files the
device tool returns); call 2's hold both phases' steps.
EOF
  return $fits
}

# ------------------------------------------------------------------------------------ arguments
only_prerequisites=false
case "${1:-}" in
  --self-check) exec tests/gpu/gpu_check_test.sh ;;
  --plan) plan; exit ;;
  --prerequisites) phase=build only_prerequisites=true ;;
  build | run) phase=$1 ;;
  *)
    echo "usage: tools/gpu_check.sh build|run|--prerequisites [RESULTS_DIR] | --plan | --self-check" >&2
    exit 2
    ;;
esac
shift
results=${1:-${OUT:-gpu_check_results}}
mkdir -p "$results" && results=$(cd "$results" && pwd) || exit 1
export kit=${MOCO_GPUKIT:-.gpukit/kit.tar.gz}
export build=${MOCO_GPU_BUILD:-build-gpu}
export state=$build/gpu_check_state # what the run phase takes from the build phase: its steps, torch's facts
batch=${MOCO_BENCH_BATCH:-256}
bench_steps=${MOCO_BENCH_STEPS:-30}
records=$results/gpu_check.tsv # phase, name, status, seconds, limit, detail
log=$results/gpu_check.log
: >"$records"
: >"$log"
# The steps' logs and the benchmarks' figures; removed however the script ends (the runs in it are
# small: the tiny synthetic config).
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 1
export work
trap 'rm -rf "$work"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
t0=$SECONDS
deadline=$((t0 + phase_s))
missing=0 # required prerequisites that failed: the phase stops before it builds or runs anything
say() { echo "gpu_check: [$((SECONDS - t0))s] $*" | tee -a "$log" >&2; }

# ------------------------------------------------------------------------------------- results
# The JSON from the records so far (no torch import: it runs after every step). A step named
# "(ended)" marks a phase that reached its end rather than being killed.
write_results() {
  timeout 10 python3 - "$records" "$results/gpu_check.json" "$work" "$state/facts.json" <<'PY'
import json, os, sys
records, results, work, facts = sys.argv[1:5]
out = {"phases": {}, "checks": [], "facts": {}}

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:  # a file half-written by a step killed at its limit
        return {"unreadable": str(e)}

with open(records, encoding="utf-8", errors="replace") as f:
    for line in f:
        phase, name, status, seconds, limit, detail = line.rstrip("\n").split("\t", 5)
        out["phases"].setdefault(phase, {"ended": False})
        if name == "(ended)":
            out["phases"][phase] = {"ended": True, "seconds": int(seconds), "summary": detail}
            continue
        out["checks"].append({"phase": phase, "name": name, "status": status, "seconds": int(seconds),
                              "limit": int(limit), "last_lines": detail})
if os.path.exists(facts):
    out["facts"] = load(facts)
for name in ("bench_gpu", "bench_pytorch", "bench_gpu_trainer"):
    path = os.path.join(work, name + ".json")
    if os.path.exists(path):
        out[name] = load(path)
if "img_per_s" in out.get("bench_gpu", {}) and "img_per_s" in out.get("bench_pytorch", {}):
    out["bench_ratio"] = out["bench_gpu"]["img_per_s"] / out["bench_pytorch"]["img_per_s"]
out["all_passed"] = (all(c["status"] in ("pass", "skipped") for c in out["checks"])
                     and all(p["ended"] for p in out["phases"].values()))
with open(results + ".tmp", "w") as f:
    json.dump(out, f, indent=2)
os.replace(results + ".tmp", results)
PY
}

# record NAME STATUS SECONDS LIMIT DETAIL: one result, on disk at once. The build phase's records
# are kept in the build folder too, for the run phase's results.
record() {
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$phase" "$1" "$2" "$3" "$4" \
    "$(printf '%s' "$5" | tr '\t\n' '  ' | tr -d '\000-\037' | cut -c1-400)" >>"$records"
  if [ "$phase" = build ] && [ -d "$state" ]; then cp "$records" "$state/build.tsv"; fi
  write_results
}

# time_left LIMIT: LIMIT, or what is left of the phase if less (0: nothing left).
time_left() {
  local left=$((deadline - SECONDS))
  [ "$left" -lt 0 ] && left=0
  echo $((left < $1 ? left : $1))
}

# bounded LIMIT NAME CMD...: CMD for at most LIMIT seconds. timeout runs programs, not shell
# functions, so CMD runs in a child bash, where the functions exported below are defined.
bounded() {
  local limit=$1 name=$2
  shift 2
  [ "$limit" -gt 0 ] || return 124 # timeout 0 would mean no limit
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@"
}

# check NAME CMD...: runs CMD under NAME's limit with its output in $work/NAME.log; one record.
check() {
  local name=$1 limit start=$SECONDS status=pass rc=0 note=""
  shift
  limit=$(limit_of "$phase" "$name") || exit 2
  limit=$(time_left "$limit")
  if [ "$limit" -eq 0 ]; then
    say "$name: not run (no time left in the phase's $phase_s s)"
    record "$name" no_time 0 0 "no time left in the phase's $phase_s s"
    return 1
  fi
  say "$name (at most $limit s): $*"
  bounded "$limit" "$name" "$@" >"$work/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    status=fail
    case $rc in 124 | 137) note="timed out at its limit of $limit s; " ;; esac
    { echo "---- $name: ${note}last lines" && tail -n 40 "$work/$name.log"; } >>"$log"
  fi
  record "$name" "$status" "$((SECONDS - start))" "$limit" "$note$(tail -n 3 "$work/$name.log")"
  say "$name: $status ($((SECONDS - start)) s)"
  [ "$status" = pass ]
}

# prerequisite NAME REQUIRED|WANTED|OPTIONAL HINT CMD...: one line saying what CMD found (its first
# line of output) or what fails and what that costs. A REQUIRED one failing stops the phase before
# it builds or runs anything; a WANTED one fails and the phase goes on; an OPTIONAL one is skipped.
prerequisite() {
  local name=$1 need=$2 hint=$3 limit out found rc=0 start=$SECONDS status
  shift 3
  limit=$(limit_of "$phase" "$name") || exit 2
  out=$(bounded "$(time_left "$limit")" "$name" "$@" 2>&1) || rc=$?
  found=${out%%$'\n'*}
  if [ "$rc" -eq 0 ] && [ -n "$found" ]; then
    say "prerequisite $name: ok ($found)"
    record "prerequisite:$name" pass "$((SECONDS - start))" "$limit" "$found"
    return 0
  fi
  [ -n "$found" ] && hint="$found; $hint"
  case $need in
    OPTIONAL) status=skipped ;;
    REQUIRED) status=fail missing=$((missing + 1)) ;;
    *) status=fail ;;
  esac
  say "prerequisite $name: $([ "$status" = fail ] && echo FAILED || echo skipped) ($hint)"
  record "prerequisite:$name" "$status" "$((SECONDS - start))" "$limit" "$hint"
  return 1
}

# finish: the phase's last record, and a short table last (the device tool's reply shows the end
# of the output). Exit status: 0 when none of the phase's steps failed.
finish() {
  local counts
  counts=$(awk -F'\t' -v p="$phase" '$1 == p { n[$3]++ }
    END { printf "%d passed, %d failed, %d skipped, %d not run for want of time", n["pass"], n["fail"], n["skipped"], n["no_time"] }' "$records")
  record "(ended)" ended "$((SECONDS - t0))" "$phase_s" "$counts"
  say "$phase phase: $counts in $((SECONDS - t0)) s of $phase_s; $results/gpu_check.json"
  awk -F'\t' -v p="$phase" '$1 == p && $2 != "(ended)" { printf "  %-36s %-7s %4d/%d s\n", $2, $3, $4, $5 }' "$records"
  ! grep -Eq "^$phase"$'\t[^\t]*\t(fail|no_time)\t' "$records"
}

# ----------------------------------------------------------------------- prerequisites' commands
# Each prints one line (what it found) and fails when the prerequisite is not met.

# unpack_kit TARBALL DEST: the kit in the build folder, where the run phase finds it again.
unpack_kit() {
  [ -f "$1" ] || return 1
  rm -rf "$2" && mkdir -p "$2" && tar -C "$2" -xzf "$1" && ls "$2"/*/env.sh >/dev/null &&
    echo "$1 ($(du -h "$1" | cut -f1)) unpacked into $2"
}

# use_kit: the kit's environment (PATH, LD_LIBRARY_PATH, CMAKE_PREFIX_PATH, Open MPI's relocation).
use_kit() {
  local env
  for env in "$build"/gpukit/*/env.sh; do
    # shellcheck source=/dev/null
    [ -f "$env" ] && source "$env" 2>>"$log"
  done
  return 0
}

# torch_facts: one import of python3's torch records what the other lines compare, in
# $state/facts.json (into the results) and $state/facts.txt ("key value" lines, for fact). The
# process runs with NVIDIA_TF32_OVERRIDE=0 and torch's allow_tf32 on: an fp32 matmul against
# float64 then shows whether the override turns TF32 off (tf32_off). Fails without a CUDA device,
# saying why in its last line of stderr (torch's warnings may come before).
torch_facts() {
  NVIDIA_TF32_OVERRIDE=0 python3 - "$state" 2>"$work/torch_facts.err" <<'PY' || { tail -n 1 "$work/torch_facts.err"; return 1; }
import ctypes, json, os, subprocess, sys
state = sys.argv[1]
facts = {}

def save():
    with open(os.path.join(state, "facts.json.tmp"), "w") as f:
        json.dump(facts, f, indent=1)
    os.replace(os.path.join(state, "facts.json.tmp"), os.path.join(state, "facts.json"))
    with open(os.path.join(state, "facts.txt"), "w") as f:
        f.writelines(f"{k} {v}\n" for k, v in facts.items())

def nccl_code(code):  # NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z since 2.9
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}" if code >= 10000 else \
           f"{code // 1000}.{code % 1000 // 100}.{code % 100}"

try:
    import torch
except ImportError as e:
    sys.exit(f"python3 has no torch: {e}")
facts.update(torch=torch.__version__, cuda=torch.version.cuda or "none",
             cxx11_abi=int(torch._C._GLIBCXX_USE_CXX11_ABI), cmake_prefix=torch.utils.cmake_prefix_path,
             tf32_defaults=f"matmul {torch.backends.cuda.matmul.allow_tf32}, cudnn {torch.backends.cudnn.allow_tf32}")
try:
    import torchvision
    facts["torchvision"] = torchvision.__version__
except ImportError:
    pass
if not torch.cuda.is_available():
    save()
    sys.exit(f"torch {torch.__version__} (CUDA {facts['cuda']}) sees no CUDA device")
facts["device"] = torch.cuda.get_device_name(0)
facts["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True, timeout=20)
facts["gpu"] = smi.stdout.strip()
try:
    built = torch.cuda.nccl.version()  # the NCCL torch was compiled with
    facts["nccl_torch_built"] = nccl_code(built) if isinstance(built, int) else ".".join(map(str, built[:3]))
    # The libnccl this process loaded (libtorch_cuda needs it), and its own ncclGetVersion.
    with open("/proc/self/maps") as maps:
        loaded = sorted({l.split()[-1] for l in maps if os.path.basename(l.split()[-1]).startswith("libnccl")})
    code = ctypes.c_int()
    if loaded and ctypes.CDLL(loaded[0]).ncclGetVersion(ctypes.byref(code)) == 0:
        facts["nccl_loaded"], facts["nccl_library"] = nccl_code(code.value), loaded[0]
except (AttributeError, OSError, RuntimeError) as e:  # a torch without NCCL: nccl_headers says so
    facts["nccl_error"] = str(e)
torch.backends.cuda.matmul.allow_tf32 = True  # what NVIDIA_TF32_OVERRIDE=0 must overrule
g = torch.Generator().manual_seed(0)
a, b = (torch.randn(1024, 1024, dtype=torch.float64, generator=g) for _ in range(2))
got = (a.float().cuda() @ b.float().cuda()).double().cpu()
facts["fp32_matmul_rel_err"] = "%.1e" % float((got - a @ b).norm() / (a @ b).norm())
save()
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {facts['device']}")
PY
}

# fact KEY: a value torch_facts recorded (fails if it recorded none).
fact() { awk -v k="$1" '$1 == k { sub(/^[^ ]* /, ""); print; found = 1 } END { exit !found }' "$state/facts.txt" 2>/dev/null; }

nvcc_release() { nvcc --version | grep -m1 'release'; }

nvcc_cuda_major() {
  local nvcc torch
  nvcc=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  torch=$(fact cuda)
  echo "nvcc's CUDA ${nvcc:-?}, torch's ${torch:-?}"
  [ -n "$nvcc" ] && [ "$nvcc" = "${torch%%.*}" ]
}

# cxx11_abi: torch's C++ ABI against the kit's. A library built with the new ABI names
# std::__cxx11::basic_string in its dynamic symbols; yaml-cpp's API takes strings throughout.
cxx11_abi() {
  local lib torch kit
  torch=$(fact cxx11_abi) || torch="? (no torch facts)"
  lib=$(find "$build/gpukit" -name 'libyaml-cpp.so*' -type f 2>/dev/null | head -n 1)
  if [ -z "$lib" ]; then
    kit="? (no libyaml-cpp in $build/gpukit)"
  elif grep -qa '__cxx11' "$lib"; then
    kit="1 (${lib##*/})"
  else
    kit="0 (${lib##*/})"
  fi
  echo "torch's _GLIBCXX_USE_CXX11_ABI $torch, the kit's $kit"
  [ "$torch" = "${kit%% *}" ] # "?" is never torch's value
}

# tf32_off: the matmul torch_facts ran with the override and allow_tf32 came out at fp32's error
# (3e-7 of float64's at this size, seen on the CPU here; TF32's 10-bit mantissa gives about 3e-4).
tf32_off() {
  local err
  err=$(fact fp32_matmul_rel_err) || { echo "no probe: torch saw no CUDA device"; return 1; }
  echo "NVIDIA_TF32_OVERRIDE=0 for gpu_tests: fp32 matmul with allow_tf32 at $err of float64;" \
    "elsewhere torch's defaults ($(fact tf32_defaults))"
  awk -v e="$err" 'BEGIN { exit !(e < 1e-5) }'
}

ninja_version() { command -v ninja >/dev/null && echo "ninja $(ninja --version)"; }

# nccl_headers: after configure, the nccl.h CMake chose against the libnccl torch loaded. A process
# holds one libnccl.so.2; code compiled against another version's header may not match it.
nccl_headers() {
  local dir header version loaded
  dir=$(sed -n 's/^MOCO_NCCL_INCLUDE_DIR:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
  header=$dir/nccl.h
  [ -f "$header" ] || { echo "no nccl.h in the build's cache"; return 1; }
  version=$(for part in MAJOR MINOR PATCH; do sed -n "s/^#define NCCL_$part \([0-9]*\).*/\1/p" "$header"; done | paste -sd.)
  loaded=$(fact nccl_loaded || fact nccl_torch_built)
  echo "nccl.h $version ($header), torch's libnccl ${loaded:-?} ($(fact nccl_library || echo "version torch was built with"))"
  [ "$version" = "$loaded" ]
}

# build_present TARGET...: the build call's targets and kit, on this (warm) machine.
build_present() {
  local target
  for target in "$@"; do [ -x "$build/$target" ] || return 1; done
  ls "$build"/gpukit/*/env.sh >/dev/null 2>&1 && grep -q $'^build\tbuild\tpass\t' "$state/build.tsv" &&
    echo "$build/ from the build call: $* and the kit"
}

export -f unpack_kit torch_facts fact nvcc_release nvcc_cuda_major cxx11_abi tf32_off ninja_version \
  nccl_headers build_present

# ------------------------------------------------------------------------------------ the checks
export run_dir=$work/runs
export tiny_config=tests/fixtures/tiny_synthetic.yaml

# tiny_train NAME OVERRIDES...: a short run of the tests' tiny synthetic config on cuda:0.
tiny_train() {
  local name=$1
  shift
  "$build/moco_dist" --config "$tiny_config" train.epochs=4 "train.output_dir=$run_dir/$name" "$@" &&
    grep -q "device cuda:0" "$run_dir/$name/rank0.log"
}

# The reducer's hooks ran on the device when a step reports gradient bytes reduced (0 at world size
# 1 without the switch).
world_of_one_nccl() {
  tiny_train nccl1 dist.world_group_at_one=true train.stop_at_step=20 &&
    grep -q "collectives: MPI, NCCL for CUDA tensors across 1 rank" "$run_dir/nccl1/rank0.log" &&
    grep -Eq '"grad_bytes_per_step":[1-9]' "$run_dir/nccl1/metrics.jsonl"
}

stop_resume_verify() { # SIGUSR1 mid-run, resumed to step 30, every checkpoint verified
  local out=$run_dir/stop pid
  "$build/moco_dist" --config "$tiny_config" train.epochs=1000 "train.output_dir=$out" &
  pid=$!
  until grep -Eq '"step":5[,}]' "$out/metrics.jsonl" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || return 1
    sleep 0.2
  done
  kill -USR1 $pid && wait $pid && grep -q '"event":"preempted"' "$out/metrics.jsonl" &&
    "$build/moco_dist" --config "$tiny_config" train.epochs=4 "train.output_dir=$out" train.stop_at_step=30 &&
    grep -q '"event":"resume"' "$out/metrics.jsonl" && grep -Eq '"step":30[,}]' "$out/metrics.jsonl" &&
    "$build/moco_ckpt" verify "$out"
}

export -f tiny_train world_of_one_nccl stop_resume_verify

# ------------------------------------------------------------------------------------ the phases
build_phase() {
  rm -rf "$state" && mkdir -p "$state" # nothing of an earlier build call's facts or steps
  prerequisite kit REQUIRED "no $kit: make it with tools/gpu_kit.sh where apt works and carry .gpukit" \
    unpack_kit "$kit" "$build/gpukit"
  use_kit
  prerequisite gpu REQUIRED "nvidia-smi lists no GPU" nvidia-smi -L
  prerequisite torch_cuda REQUIRED "python3's torch must see a CUDA device: the build uses its LibTorch" torch_facts
  prerequisite torchvision OPTIONAL "bench_pytorch (PyTorch's MoCo step) is skipped" fact torchvision
  prerequisite nvcc REQUIRED "CUDA's compiler, for CMake's CUDA toolkit" nvcc_release
  prerequisite nvcc_cuda_major REQUIRED "CMake's CUDA toolkit must be the CUDA torch was built with" nvcc_cuda_major
  prerequisite cxx11_abi REQUIRED "std::string crosses between torch and the kit's libraries: the link would fail" cxx11_abi
  prerequisite tf32_off WANTED "gpu_tests' GPU figures may differ from their CPU references" tf32_off
  prerequisite cmake REQUIRED "CMake 3.18 or later" cmake --version
  prerequisite ninja OPTIONAL "builds with Unix Makefiles instead" ninja_version
  if [ "$missing" -gt 0 ] || $only_prerequisites; then
    say "$missing required prerequisite(s) failed"
    return
  fi
  local generator=(-G Ninja)
  command -v ninja >/dev/null || generator=(-G "Unix Makefiles")
  # The GPU's architecture named, torch's CMake skips compiling and running a probe for it.
  check configure env "TORCH_CUDA_ARCH_LIST=$(fact capability)" cmake -S . -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DMOCO_WITH_CUDA=ON -DMOCO_WITH_NCCL=ON \
    "-DCMAKE_PREFIX_PATH=$(fact cmake_prefix);${CMAKE_PREFIX_PATH:-}" || return
  prerequisite nccl_headers WANTED "NCCL calls may not match the library that serves them" nccl_headers
  check build cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}

run_phase() {
  [ -f "$state/build.tsv" ] && cat "$state/build.tsv" >>"$records" # the build call's steps, here too
  prerequisite build_present REQUIRED "no $build/ with the build call's targets: this is not the build call's machine (one that went back starts bare); make both calls again, back to back" \
    build_present "${targets[@]}" || return
  use_kit
  prerequisite gpu REQUIRED "nvidia-smi lists no GPU" nvidia-smi -L || return

  # TF32 off: these tests compare GPU results with CPU tensors. The trainings and benchmarks keep
  # LibTorch's defaults (they compare nothing with the CPU, and both benchmarks get the same ones).
  check gpu_tests env NVIDIA_TF32_OVERRIDE=0 ctest --test-dir "$build" --output-on-failure --timeout 40 -j 8 \
    -R "$gpu_tests_regex"
  check train_fp32 tiny_train fp32 train.stop_at_step=20
  check train_bf16_channels_last tiny_train bf16 train.precision=bf16 train.channels_last=true train.stop_at_step=20
  check world_of_one_nccl world_of_one_nccl
  # No host sync inside a step that does not report (docs/distributed.md, "Host syncs"), through the
  # NCCL group, the CUDA reducer hooks and the CUDA shuffle: LibTorch's sync debug mode makes any an error.
  check no_host_sync_in_step tiny_train nosync dist.world_group_at_one=true debug.check_step_syncs=true \
    dist.queue_check_every=0 train.log_every=10 train.stop_at_step=30
  check stop_resume_verify stop_resume_verify
  check debug_mode "$build/moco_dist" --config configs/debug.yaml "train.output_dir=$run_dir/debug" train.stop_at_step=8

  check bench_gpu "$build/bench_gpu" --batch "$batch" --steps "$bench_steps" --json "$work/bench_gpu.json"
  if fact torchvision >/dev/null; then
    check bench_pytorch python3 bench/moco_step_pytorch.py --batch "$batch" --steps "$bench_steps" \
      --json "$work/bench_pytorch.json"
  else
    record bench_pytorch skipped 0 "$(limit_of run bench_pytorch)" "no torchvision in python3"
  fi
  check bench_gpu_trainer "$build/bench_gpu" --mode trainer --steps 20 --json "$work/bench_gpu_trainer.json"
}

"${phase}_phase"
finish
