#!/usr/bin/env bash
# The golden runs: what a tiny run of each method prints and logs, compared line for line with a file
# recorded before the methods moved into their rooms (issue 49), so that no refactor changes a loss,
# an accuracy, a JSONL field or a log line unnoticed. One case per ctest entry:
#   golden_test.sh CASE BUILD_DIR WORK_DIR [--record]
# --record writes tests/golden/CASE.torch<version>.txt instead of comparing. The runs fix what moves
# bits between machines: one thread, OpenBLAS's Haswell kernels, ATen's and oneDNN's AVX2 code. A
# LibTorch with no recorded file for its version skips (exit 77): its kernels round differently.
set -euo pipefail
case_name=$1 build=$2 work=$3 mode=${4:-check}
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist lincls=$build/moco_lincls py=/usr/bin/python3
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2
rm -rf "$work" && mkdir -p "$work"
loop=(train.threads=1 data.workers=1 train.epochs=1 knn.memory_size=128 knn.query_size=64 ckpt.every_minutes=0
      ckpt.async=false)
tiny=(--config "$src/tests/fixtures/tiny_synthetic.yaml" "${loop[@]}")
v3=(--config "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${loop[@]}" model.dim=32 v3.mlp_dim=64 optim.optimizer=lars
    optim.base_lr=0.3 optim.weight_decay=1e-6 optim.warmup_epochs=0.25 optim.lr_update=step)
vit=(--config "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${loop[@]}" model.arch=vit_tiny_cpu model.dim=32 v3.mlp_dim=64
     v3.projector_layers=3 optim.optimizer=adamw optim.base_lr=1.5e-4 optim.weight_decay=0.1 data.augmentation=v3
     optim.warmup_epochs=0.25 optim.lr_update=step data.synthetic_train_size=256)
np2=(mpirun -np 2 --oversubscribe)
# tests/fixtures/pre_rooms/{v2,v3}: step 2 of 4 of these runs, written by moco_dist before issue 49
# (commit f5e96ca); resumed here, they must train steps 3 and 4 as that moco_dist did.
small=(train.threads=1 data.workers=1 knn.memory_size=64 knn.query_size=32 ckpt.every_minutes=0 ckpt.async=false
       model.width=0.0625 model.dim=8 data.synthetic_train_size=128 train.epochs=1 knn.raw_baseline=false)
small_v2=(--config "$src/tests/fixtures/tiny_synthetic.yaml" "${small[@]}" moco.queue_size=64)
small_v3=(--config "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${small[@]}" v3.mlp_dim=16 optim.optimizer=lars
          optim.lr_update=step)

run() {  # run NAME COMMAND...: its console and metrics.jsonl kept under $work
  local name=$1
  shift
  "$@" train.output_dir="$work/$name" >"$work/$name.console" 2>&1 || { cat "$work/$name.console"; exit 1; }
}

case $case_name in
v2_np1) run run "$dist" "${tiny[@]}" ;;
v2_np2) run run "${np2[@]}" "$dist" "${tiny[@]}" ;;
v3_np1) run run "$dist" "${v3[@]}" ;;
v3_np2) run run "${np2[@]}" "$dist" "${v3[@]}" ;;
v3_vit_np2) run run "${np2[@]}" "$dist" "${vit[@]}" ;;
lincls_np2)
  run pre "$dist" "${tiny[@]}"
  run run "${np2[@]}" "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$work/pre"
  ;;
lincls_views_np1)  # a new augmented view each step, the step schedule
  run pre "$dist" "${tiny[@]}"
  run run "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$work/pre" lincls.cached_features=false
  ;;
resume_v2_pre_rooms)
  mkdir -p "$work/run" && cp -r "$src/tests/fixtures/pre_rooms/v2/checkpoints" "$work/run/"
  run run "$dist" "${small_v2[@]}"
  ;;
resume_v3_pre_rooms)
  mkdir -p "$work/run" && cp -r "$src/tests/fixtures/pre_rooms/v3/checkpoints" "$work/run/"
  run run "$dist" "${small_v3[@]}"
  ;;
*) echo "unknown case $case_name" >&2; exit 2 ;;
esac

version=$("$py" - "$build/CMakeCache.txt" <<'PY'
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"Torch_DIR:PATH=(.*)", line)
    if m: torch_dir = m.group(1)
import glob, os
cfg = glob.glob(os.path.join(torch_dir, "TorchConfigVersion.cmake"))
text = open(cfg[0]).read() if cfg else ""
m = re.search(r'PACKAGE_VERSION "(\d+)\.(\d+)', text)
print(f"{m.group(1)}.{m.group(2)}" if m else "unknown")
PY
)
golden=$src/tests/golden/$case_name.torch$version.txt
"$py" "$src/tests/golden/digest.py" "$work" "$work/run" "$work/run.console" >"$work/digest.txt"
if [ "$mode" = --record ]; then
  cp "$work/digest.txt" "$golden"
  echo "recorded $golden ($(wc -l <"$golden") lines)"
  exit 0
fi
if [ ! -f "$golden" ]; then
  echo "SKIP: no golden file for LibTorch $version ($golden)"
  exit 77
fi
diff "$golden" "$work/digest.txt" || { echo "FAIL: $case_name differs from $golden"; exit 1; }
echo "$case_name: $(wc -l <"$golden") lines as recorded"
