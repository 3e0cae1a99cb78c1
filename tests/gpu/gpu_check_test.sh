#!/usr/bin/env bash
# tools/gpu_check.sh --self-check: what of the device-day script can be checked without a GPU.
#  - both GPU scripts parse;
#  - the kit's package list matches the build (gpu_kit_test.sh), and PyTorch's MoCo step runs on CPU;
#  - the prerequisite lines: on this machine (no GPU) `--prerequisites DIR` exits 1, says one line
#    per prerequisite, and has already written DIR/gpu_check.json with each of them and its limit
#    (results are on disk as soon as known, so a call killed later still returns them);
#  - the missing GPU is named as required, a missing ninja only as optional;
#  - the C++ ABI line compares torch's (Debian's torch: the new ABI) with the kit's libraries': a kit
#    whose libyaml-cpp has only old-ABI names fails it, one with new-ABI names passes;
#  - `run` on a machine without the build call's folder (a fresh machine) stops at once, saying so;
#  - the run phase on a fake machine (fake nvidia-smi, ctest and programs that write what the checks
#    look for): each check runs its shell function or program under its limit and passes, the
#    benchmark's figure reaches gpu_check.json; with the first check hanging and a 6 s phase, it is
#    recorded as timed out and the later ones as not run (no_time), the JSON still whole;
#  - every call removes its temporary folder, also when it fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash -n tools/gpu_check.sh
bash -n tools/gpu_kit.sh
tests/gpu/gpu_kit_test.sh

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# This machine's PATH without nvidia-smi, nvcc or ninja, whatever it has; python3 is Debian's, which
# has torch (a CPU one), as gpu_kit_test.sh runs it.
bin=$dir/bin
mkdir -p "$bin"
ln -s /usr/bin/python3 "$bin/python3"
IFS=: read -r -a folders <<<"$PATH"
for folder in "${folders[@]}"; do
  for tool in "$folder"/*; do
    name=${tool##*/}
    case $name in nvidia-smi | nvcc | ninja) continue ;; esac
    [ -x "$tool" ] && [ ! -e "$bin/$name" ] && ln -s "$tool" "$bin/$name"
  done
done

# gpu_check CASE KIT ARGS...: the script on that PATH with the kit KIT, its build folder and its
# temporary folders under $dir/CASE, its results in $dir/CASE/results, its output in $dir/CASE/out.txt;
# prints the exit status. The temporary folder must be gone afterwards, however it ended.
gpu_check() {
  local case=$1 kit=$2 rc=0
  shift 2
  mkdir -p "$dir/$case/tmp"
  PATH=$bin TMPDIR=$dir/$case/tmp MOCO_GPUKIT=$kit MOCO_GPU_BUILD=$dir/$case/build \
    tools/gpu_check.sh "$@" "$dir/$case/results" >"$dir/$case/out.txt" 2>&1 || rc=$?
  cat "$dir/$case/out.txt" >&2
  if [ -n "$(ls -A "$dir/$case/tmp")" ]; then
    echo "gpu_check_test: $case left its temporary folder: $(ls "$dir/$case/tmp")" >&2
    exit 1
  fi
  echo "$rc"
}

# 1. No kit, no GPU: the prerequisite lines.
rc=$(gpu_check nokit /nonexistent/kit.tar.gz --prerequisites)
[ "$rc" -eq 1 ] || { echo "gpu_check_test: --prerequisites without a GPU exited $rc, not 1" >&2; exit 1; }
/usr/bin/python3 - "$dir/nokit/results/gpu_check.json" "$dir/nokit/out.txt" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
status = {c["name"]: c["status"] for c in results["checks"]}
expected = ["kit", "gpu", "torch_cuda", "torchvision", "nvcc", "nvcc_cuda_major", "cxx11_abi", "tf32_off",
            "cmake", "ninja"]
assert [n.split(":", 1)[1] for n in status] == expected, status
for name in ("kit", "gpu", "torch_cuda", "nvcc", "nvcc_cuda_major", "cxx11_abi", "tf32_off"):
    assert status["prerequisite:" + name] == "fail", (name, status)
assert status["prerequisite:cmake"] == "pass", status
assert status["prerequisite:ninja"] == "skipped", status  # optional: Unix Makefiles instead
assert all(c["limit"] > 0 and c["phase"] == "build" for c in results["checks"]), results["checks"]
assert results["phases"] == {"build": results["phases"]["build"]} and results["phases"]["build"]["ended"], results
assert results["all_passed"] is False
assert results["facts"]["cxx11_abi"] == 1, results["facts"]  # Debian's torch, recorded without a GPU
for name in expected:
    lines = [l for l in out.splitlines() if f"prerequisite {name}: " in l]
    assert len(lines) == 1, (name, lines)
print(f"gpu_check_test: {len(expected)} prerequisite lines, results on disk before any build: {status}")
PY

# 2. Kits whose libyaml-cpp has only old-ABI names (std::string mangled Ss), then new-ABI ones.
abi_line() {  # abi_line CASE MANGLED_NAME: the cxx11_abi record of a run with such a kit
  mkdir -p "$dir/$1/kit/root/usr/lib/x86_64-linux-gnu"
  echo '# no environment: a test kit' >"$dir/$1/kit/env.sh"
  printf '\0%s\0' "$2" >"$dir/$1/kit/root/usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7"
  tar -C "$dir/$1" -czf "$dir/$1/kit.tar.gz" kit
  gpu_check "$1" "$dir/$1/kit.tar.gz" --prerequisites >/dev/null
  /usr/bin/python3 -c 'import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["checks"]}
assert checks["prerequisite:kit"]["status"] == "pass", checks["prerequisite:kit"]
abi = checks["prerequisite:cxx11_abi"]
print(abi["status"], abi["last_lines"])' "$dir/$1/results/gpu_check.json"
}
old=$(abi_line oldabi _ZN4YAML4LoadERKSs)
new=$(abi_line newabi _ZN4YAML4LoadERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE)
echo "gpu_check_test: old-ABI kit: $old"
echo "gpu_check_test: new-ABI kit: $new"
[[ $old == "fail torch's _GLIBCXX_USE_CXX11_ABI 1, the kit's 0 "* ]] || { echo "gpu_check_test: the old-ABI kit was not refused" >&2; exit 1; }
[[ $new == "pass torch's _GLIBCXX_USE_CXX11_ABI 1, the kit's 1 "* ]] || { echo "gpu_check_test: the new-ABI kit was refused" >&2; exit 1; }

# 3. The run call on a machine without the build call's folder: one failed line, at once.
rc=$(gpu_check nobuild /nonexistent/kit.tar.gz run)
[ "$rc" -eq 1 ] || { echo "gpu_check_test: run without a build exited $rc, not 1" >&2; exit 1; }
/usr/bin/python3 - "$dir/nobuild/results/gpu_check.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
[check] = results["checks"]
assert check["name"] == "prerequisite:build_present" and check["status"] == "fail", check
assert "make both calls again" in check["last_lines"], check
assert results["phases"]["run"]["ended"] and results["all_passed"] is False, results
print("gpu_check_test: run without the build call's folder stops at build_present")
PY

# 4. The run phase on a fake machine: DIR/build as the build call leaves it, with fake programs, and
# DIR/bin with a fake nvidia-smi and ctest.
fake_machine() {
  local d=$1 b=$1/build
  mkdir -p "$d/bin" "$b/gpukit/kit" "$b/gpu_check_state"
  echo '# no environment: a test kit' >"$b/gpukit/kit/env.sh"
  printf 'build\tbuild\tpass\t1\t270\tfake\nbuild\t(ended)\tended\t1\t480\tfake\n' >"$b/gpu_check_state/build.tsv"
  echo 'torch 0.0-fake' >"$b/gpu_check_state/facts.txt" # no torchvision: bench_pytorch is skipped
  printf '#!/bin/sh\necho "GPU 0: a fake"\n' >"$d/bin/nvidia-smi"
  cat >"$d/bin/ctest" <<'SH'
#!/bin/sh
[ -n "${FAKE_HANG:-}" ] && exec sleep 60
echo "100% tests passed (a fake ctest)"
SH
  printf '#!/bin/sh\necho "verified (a fake)"\n' >"$b/moco_ckpt"
  cp "$b/moco_ckpt" "$b/moco_tests"
  cat >"$b/bench_gpu" <<'SH'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --json ] && echo '{"img_per_s": 1000.0}' >"$2"; shift; done
SH
  # moco_dist: steps into metrics.jsonl, SIGUSR1 a preemption, a second run in the folder a resume.
  cat >"$b/moco_dist" <<'SH'
#!/usr/bin/env bash
out= stop=100
for a in "$@"; do
  case $a in
    train.output_dir=*) out=${a#*=} ;;
    train.stop_at_step=*) stop=${a#*=} ;;
  esac
done
mkdir -p "$out"
echo "device cuda:0; collectives: MPI, NCCL for CUDA tensors across 1 rank" >>"$out/rank0.log"
[ -f "$out/metrics.jsonl" ] && echo '{"event":"resume"}' >>"$out/metrics.jsonl"
trap 'echo "{\"event\":\"preempted\"}" >>"$out/metrics.jsonl"; exit 0' USR1
# The reducer's bytes as the real one reports them: none at world size 1 without dist.world_group_at_one.
grad=0
[[ " $* " == *" dist.world_group_at_one=true "* ]] && grad=4096
for ((s = 1; s <= stop; s++)); do echo "{\"step\":$s,\"grad_bytes_per_step\":$grad}" >>"$out/metrics.jsonl"; sleep 0.02; done
SH
  chmod +x "$d/bin"/* "$b"/moco_* "$b/bench_gpu"
}
for case in fakerun fakehang; do
  fake_machine "$dir/$case"
  mkdir -p "$dir/$case/tmp"
  rc=0 hang=()
  [ "$case" = fakehang ] && hang=(FAKE_HANG=1 MOCO_GPU_PHASE_S=6)
  env PATH="$dir/$case/bin:$bin" TMPDIR="$dir/$case/tmp" MOCO_GPU_BUILD="$dir/$case/build" "${hang[@]}" \
    tools/gpu_check.sh run "$dir/$case/results" >"$dir/$case/out.txt" 2>&1 || rc=$?
  [ -z "$(ls -A "$dir/$case/tmp")" ] || { echo "gpu_check_test: $case left its temporary folder" >&2; exit 1; }
  /usr/bin/python3 - "$case" "$rc" "$dir/$case/results/gpu_check.json" <<'PY' || { cat "$dir/$case/out.txt"; exit 1; }
import json, sys
case, rc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
results = json.load(open(path))
run = {c["name"]: c for c in results["checks"] if c["phase"] == "run"}
names = ["prerequisite:build_present", "prerequisite:gpu", "gpu_tests", "train_fp32", "train_bf16_channels_last",
         "world_of_one_nccl", "no_host_sync_in_step", "stop_resume_verify", "debug_mode", "bench_gpu", "bench_pytorch",
         "bench_gpu_trainer"]
assert list(run) == names, list(run)
assert [c["name"] for c in results["checks"] if c["phase"] == "build"] == ["build"], results["checks"]
assert results["phases"]["run"]["ended"] and run["bench_pytorch"]["status"] == "skipped", results
checked = [n for n in names if n != "bench_pytorch"]  # skipped: no torchvision on the fake machine
if case == "fakerun":
    assert rc == 0 and all(run[n]["status"] == "pass" for n in checked), (rc, run)
    assert results["bench_gpu"] == results["bench_gpu_trainer"] == {"img_per_s": 1000.0} and results["all_passed"], results
else:
    assert rc == 1 and all(run[n]["status"] == "pass" for n in checked[:2]), (rc, run)
    assert run["gpu_tests"]["status"] == "fail" and "timed out" in run["gpu_tests"]["last_lines"], run["gpu_tests"]
    assert all(run[n]["status"] == "no_time" and "no time left" in run[n]["last_lines"] for n in checked[3:]), run
    assert "bench_gpu" not in results and results["all_passed"] is False, results
print(f"gpu_check_test: run phase on a fake machine ({case}): {', '.join(c['name'] + ' ' + c['status'] for c in run.values())}")
PY
done
