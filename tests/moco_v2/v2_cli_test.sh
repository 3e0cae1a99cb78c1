#!/usr/bin/env bash
# MoCo v1/v2's config as moco_dist reads it: its keys refused for another method, what it trains
# with (its room's accepts), each an exit 2 naming file and key before any work. One case per entry:
#   v2_cli_test.sh CASE BUILD_DIR WORK_DIR
# shellcheck source=../lib/cli_case.sh
source "$(dirname "$0")/../lib/cli_case.sh"  # case_name build work src dist py tiny tiny_v3 out fail expect no_work_done

case $case_name in
keys_refused_elsewhere)
  # A key v2 reads, given to another method, names the key and both methods (tiny's model.mlp and
  # moco.*; issue 50, case 10), from the file or the command line.
  expect 2 "$tiny: key 'model.mlp' is read by model.method v2 only, and this config's model.method is v3" -- \
    "$dist" --config "$tiny" model.method=v3 train.output_dir="$out"
  no_work_done
  expect 2 "command-line override 'moco.temperature=0.5': key 'moco.temperature' is read by model.method v2 only, and this config's model.method is v3" -- \
    "$dist" --config "$tiny_v3" moco.temperature=0.5 train.output_dir="$out"
  no_work_done
  expect 2 "command-line override 'dist.queue_check_every=10': key 'dist.queue_check_every' is read by model.method v2 only" -- \
    "$dist" --config "$tiny_v3" dist.queue_check_every=10 train.output_dir="$out"
  no_work_done ;;
accepts)
  expect 2 "$tiny (with overrides): key 'optim.optimizer' lars: model.method v2 trains with sgd" -- \
    "$dist" --config "$tiny" optim.optimizer=lars train.output_dir="$out"
  no_work_done
  expect 2 "$tiny (with overrides): key 'model.arch' vit_tiny_cpu: model.method v2 trains resnet_tiny, resnet18, resnet34 or resnet50" -- \
    "$dist" --config "$tiny" model.arch=vit_tiny_cpu train.output_dir="$out"
  no_work_done
  # fp16 is moco-v3's main_moco.py's (torch.cuda.amp); moco's trains without autocast.
  expect 2 "$tiny (with overrides): key 'train.precision' fp16: model.method v2 trains in fp32 or bf16" -- \
    "$dist" --config "$tiny" train.precision=fp16 train.output_dir="$out"
  no_work_done
  no_work_done ;;
micro_batch)
  # optim.micro_batch (issue 58): each piece splits into the rank's BatchNorm groups (tiny's
  # moco.bn_splits 2 on one rank); the estimate counts one piece through the graph (ResNet-50 at 224
  # px, 1024 images on one rank: refused whole, taken in pieces of 32); a run in pieces says so and
  # cannot resume with other pieces (BatchNorm over a piece is part of the computation).
  for dry in "" --dry-run; do
    expect 2 "$tiny (with overrides): key 'optim.micro_batch' (1) must be a multiple of the 2 BatchNorm groups each of 1 rank(s) runs (moco.bn_splits 2)" -- \
      "$dist" --config "$tiny" $dry optim.micro_batch=1 train.output_dir="$out"
    no_work_done
  done
  r50=(--dry-run model.arch=resnet50 model.width=0 model.small_stem=false data.image_size=224 optim.batch_size=1024 moco.queue_size=65536
       data.synthetic_train_size=1024 train.output_dir="$out")
  expect 2 "key 'optim.batch_size' (1024) on 1 rank(s) sends 1024 views per rank at once through resnet50 at 224 px" -- \
    "$dist" --config "$tiny" "${r50[@]}"
  no_work_done
  "$dist" --config "$tiny" "${r50[@]}" optim.micro_batch=32 >"$work/r50.console" 2>&1 ||
    fail "resnet50 in pieces of 32 refused: $(tail -2 "$work/r50.console")"
  grep -q "optim.micro_batch 32: each rank's share of 1024 images in 32 pieces per step" "$work/r50.console" ||
    fail "--dry-run does not say the pieces"
  "$dist" --config "$tiny" train.threads=1 optim.micro_batch=8 train.stop_at_step=1 train.output_dir="$work/run" \
    >"$work/first.console" 2>&1 || fail "the run in pieces: $(tail -3 "$work/first.console")"
  grep -q "optim.micro_batch 8: each rank's share in pieces of 8 images, each with its own BatchNorm statistics" \
    "$work/run/rank0.log" || fail "no pieces line in the log"
  expect 2 "cannot resume, the config differs in keys that change the computation:" "optim.micro_batch: 8 in the checkpoint, 16 now" -- \
    "$dist" --config "$tiny" train.threads=1 optim.micro_batch=16 train.stop_at_step=2 train.output_dir="$work/run" ;;
sizes_bounded)
  # A queue no machine holds is named before it is allocated; within the bound, the machine's memory.
  expect 2 "$tiny (with overrides): key 'moco.queue_size' must lie in [1, 1073741824], not 100000000000" -- \
    "$dist" --config "$tiny" moco.queue_size=100000000000 train.output_dir="$out" --dry-run
  no_work_done
  expect 2 "$tiny (with overrides): key 'moco.queue_size' (1073741824) makes a queue of 16384 x 1073741824 float32" -- \
    "$dist" --config "$tiny" moco.queue_size=1073741824 model.dim=16384 train.output_dir="$out" --dry-run
  no_work_done ;;
*) fail "no case $case_name" ;;
esac
echo "PASS ($case_name)"
