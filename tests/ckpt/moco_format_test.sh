#!/usr/bin/env bash
# `moco_ckpt export RUN OUT --format moco` on tiny runs of each method (issue 52): the file the official
# main_moco.py's save_checkpoint writes, checked against the run's checkpoint bit for bit and read by the
# official scripts' loading steps (tests/interop/check_moco_export.py, Debian's torch 1.13). One case per
# ctest entry:
#   moco_format_test.sh CASE BUILD_DIR WORK_DIR
set -euo pipefail
case_name=$1 build=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist ckpt=$build/moco_ckpt py=/usr/bin/python3
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }
run() {  # run LOG COMMAND...: the command's output to LOG, shown if it fails
  local log=$1; shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  [ $rc = 0 ] || { cat "$log"; fail "exit $rc from: $*"; }
}

# 64 three-channel 16 px images in batches of 32: 2 steps an epoch, 1.5 epochs = 3 steps, so the last
# checkpoint is one whole epoch and a half in; the lr moves every step.
common=(data.synthetic_train_size=64 data.synthetic_channels=3 train.epochs=1.5 optim.lr_update=step train.threads=1
        knn.memory_size=64 knn.query_size=32 knn.raw_baseline=false ckpt.every_minutes=0)
config=$src/tests/fixtures/tiny_synthetic.yaml  # v1/v2; v3 runs take tiny_synthetic_v3.yaml (no v1/v2 keys)
# torchvision's resnet18, which the official scripts build for --arch resnet18.
resnet18=(model.arch=resnet18 model.small_stem=false model.width=0)
v3=(model.dim=32 v3.mlp_dim=64)
np=1
case $case_name in
v1_resnet18) args=("${resnet18[@]}" model.mlp=false) ;;
v2_resnet18) args=("${resnet18[@]}") ;;
# Each rank keeps its own BatchNorm statistics: the file holds rank 0's, as DDP's broadcast_buffers would.
v2_resnet18_bn_rank_local_np2) np=2 args=("${resnet18[@]}" dist.broadcast_buffers=false) ;;
v3_resnet18_lars) config=$src/tests/fixtures/tiny_synthetic_v3.yaml args=("${v3[@]}" "${resnet18[@]}" optim.optimizer=lars optim.base_lr=0.3 optim.weight_decay=1e-6
                        optim.warmup_epochs=1) ;;
v3_vit_tiny_adamw_np2) np=2 config=$src/tests/fixtures/tiny_synthetic_v3.yaml
  args=("${v3[@]}" model.arch=vit_tiny_cpu v3.projector_layers=3 v3.predictor_last_bn=true v3.stop_grad_conv1=true optim.optimizer=adamw
        optim.base_lr=1.5e-4 optim.weight_decay=0.1 optim.warmup_epochs=1) ;;
*) fail "unknown case" ;;
esac
base=(--config "$config" "${common[@]}")

if [ $np = 1 ]; then
  run "$work/run.console" "$dist" "${base[@]}" "${args[@]}" train.output_dir="$work/run"
else
  run "$work/run.console" mpirun -np $np --oversubscribe "$dist" "${base[@]}" "${args[@]}" train.output_dir="$work/run"
fi
checkpoint=$(ls -d "$work"/run/checkpoints/step_* | tail -1)
run "$work/export.console" "$ckpt" export "$work/run" "$work/checkpoint.pth.tar" --format moco
grep -q "format moco: main_moco.py's checkpoint of model.method v[23], arch " "$work/export.console" || fail "no summary line"
cat "$work/export.console"
run "$work/backbone.console" "$ckpt" export "$work/run" "$work/backbone.h5"
d2=()
case $case_name in
v1_*|v2_*)
  run "$work/d2.console" "$ckpt" export "$work/run" "$work/detectron2.pth" --format detectron2
  d2=("$work/detectron2.pth")
  # torchvision's resnet18 on RGB images: no note that the official network differs.
  ! grep -q "note:" "$work/export.console" || fail "a note for torchvision's resnet18" ;;
v3_vit_*)
  grep -q "note: model.arch=vit_tiny_cpu is moco_dist's own: the official scripts' --arch vit_tiny_cpu builds another network" \
    "$work/export.console" || fail "no note that vit_tiny_cpu is not an official arch" ;;
esac
"$py" "$src/tests/interop/check_moco_export.py" "$work/checkpoint.pth.tar" "$checkpoint" "$work/run/metrics.jsonl" \
  "$work/backbone.h5" "${d2[@]}"

# The whole model or nothing: --module and --keep-head do not apply; an HDF5 name is refused.
for bad in "--module encoder_k" "--keep-head"; do
  set +e
  out=$("$ckpt" export "$work/run" "$work/refused.pth.tar" --format moco $bad 2>&1); rc=$?
  set -e
  [ $rc = 2 ] && grep -q "export: --format moco writes the whole model, as main_moco.py saves it: --module and --keep-head do not apply" <<<"$out" ||
    fail "$bad: exit $rc, $out"
done
set +e
out=$("$ckpt" export "$work/run" "$work/refused.h5" --format moco 2>&1); rc=$?
set -e
[ $rc = 2 ] && grep -q "names another format than --format moco" <<<"$out" || fail ".h5 with --format moco: exit $rc, $out"
[ ! -e "$work/refused.pth.tar" ] && [ ! -e "$work/refused.h5" ] || fail "a refused export wrote a file"
echo "PASS: $case_name"
