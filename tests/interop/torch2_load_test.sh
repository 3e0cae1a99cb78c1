#!/usr/bin/env bash
# Every torch export (--format torch, detectron2, moco) of a tiny v2 and a tiny v3 ViT run loads with a
# plain torch.load(path) in a current torch (>= 2.6: weights_only=True by default) and holds the HDF5
# export's tensors (tests/interop/check_torch2_load.py). The torch is $MOCO_TORCH2_PYTHON: a Python with
# PyPI's torch 2.x and h5py, which `tools/build_torch2.sh --python` makes and prints (CI's torch 2.x
# stage sets it); without it the test is skipped (exit 77). By hand:
#   MOCO_TORCH2_PYTHON=$(tools/build_torch2.sh --python) ctest --test-dir build -R interop.torch2_load
#   torch2_load_test.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist ckpt=$build/moco_ckpt
export OMP_NUM_THREADS=1
py=${MOCO_TORCH2_PYTHON:-}
if [ -z "$py" ]; then
  echo "SKIP: MOCO_TORCH2_PYTHON is not set (tools/build_torch2.sh --python prints a torch 2.x Python)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {  # run LOG COMMAND...: the command's output to LOG, shown if it fails
  local log=$1; shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  [ $rc = 0 ] || { cat "$log"; fail "exit $rc from: $*"; }
}
base=(--config "$src/tests/fixtures/tiny_synthetic.yaml" data.synthetic_train_size=64 data.synthetic_channels=3
      train.epochs=1 train.threads=1 knn.memory_size=64 knn.query_size=32 knn.raw_baseline=false ckpt.every_minutes=0)
run "$work/v2.console" "$dist" "${base[@]}" model.arch=resnet18 model.small_stem=false model.width=0 train.output_dir="$work/v2"
run "$work/v3.console" "$dist" --config "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${base[@]:2}" model.arch=vit_tiny_cpu model.dim=32 \
  v3.mlp_dim=64 v3.projector_layers=3 v3.predictor_last_bn=true optim.optimizer=adamw optim.base_lr=1.5e-4 optim.weight_decay=0.1 train.output_dir="$work/v3"
checks=()
for r in v2 v3; do
  run "$work/$r.export" "$ckpt" export "$work/$r" "$work/$r.h5"
  run "$work/$r.export" "$ckpt" export "$work/$r" "$work/$r.full.h5" --keep-head
  run "$work/$r.export" "$ckpt" export "$work/$r" "$work/$r.pth" --format torch
  run "$work/$r.export" "$ckpt" export "$work/$r" "$work/$r.pth.tar" --format moco
  checks+=(torch "$work/$r.pth" "$work/$r.h5" moco "$work/$r.pth.tar" "$work/$r.full.h5")
done
run "$work/v2.export" "$ckpt" export "$work/v2" "$work/v2.d2.pth" --format detectron2
checks+=(detectron2 "$work/v2.d2.pth" "$work/v2.full.h5")
"$py" "$src/tests/interop/check_torch2_load.py" "${checks[@]}"
echo "PASS"
