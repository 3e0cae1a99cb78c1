#!/usr/bin/env bash
# moco_lincls on a MoCo v3 ViT end to end (issue 42's linear protocol for each backbone): a few v3
# steps of vit_tiny_cpu on 16 px synthetic images, then the linear protocol on that run's folder and on
# its `moco_ckpt export`, as moco-v3's main_lincls.py runs a ViT (every tensor but head.* loaded and
# frozen, the sanity check over all of them). One case per ctest entry:
#   vit_lincls_test.sh CASE BUILD_DIR WORK_DIR
set -euo pipefail
case_name=$1 build=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist lincls=$build/moco_lincls ckpt=$build/moco_ckpt py=/usr/bin/python3
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run LOG COMMAND...: the command's output to LOG, shown if it fails
  local log=$1; shift
  local rc=0
  "$@" >"$log" 2>&1 || rc=$?
  [ $rc = 0 ] || { cat "$log"; fail "exit $rc from: $*"; }
}
vit=(model.method=v3 model.arch=vit_tiny_cpu)
# vit_tiny_cpu at 16 px: cls_token, pos_embed, patch_embed.proj.{weight,bias}, 4 blocks of 12 tensors,
# norm.{weight,bias}; head.* (v3's projector) is not the backbone's.
vit_tensors=54

# field FILE EVENT KEY: the value of KEY in the last row of EVENT.
field() {
  "$py" - "$@" <<'PY'
import json, sys
path, event, key = sys.argv[1:4]
print([r for r in map(json.loads, open(path)) if r["event"] == event][-1][key])
PY
}

case $case_name in
v3_vit_tiny_np2)
  # Pre-training: 4 v3 steps on 2 ranks (AdamW, the 3-layer projector in the head's place).
  pre=(--config "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${vit[@]}" model.dim=32 v3.mlp_dim=64 v3.projector_layers=3
    optim.optimizer=adamw optim.base_lr=1.5e-4 optim.weight_decay=0.1 train.threads=1 ckpt.every_minutes=0)
  run "$work/pre.console" mpirun -np 2 --oversubscribe "$dist" "${pre[@]}" train.output_dir="$work/pre"
  # moco_dist --eval-only reads the ViT through the same backbone: the run's own final kNN top-1.
  run "$work/eval_only.console" "$dist" "${pre[@]}" --eval-only model.pretrained="$work/pre"
  knn=$("$py" -c 'import json, sys; print("%.2f" % [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "knn" and r["encoder"] == "trained"][-1]["top1"])' "$work/pre/metrics.jsonl")
  grep -q "kNN top-1: raw pixels [0-9.]*%, trained $knn% ($work/pre/checkpoints/step_" "$work/eval_only.console" ||
    { cat "$work/eval_only.console"; fail "--eval-only does not give the run's kNN top-1 $knn%"; }
  checkpoint=$(ls -d "$work"/pre/checkpoints/step_* | tail -1)
  run "$work/export.console" "$ckpt" export "$work/pre" "$work/pre.h5"
  base=(--config "$src/tests/fixtures/tiny_lincls_v3.yaml" "${vit[@]}")
  # The run's folder on 2 ranks, a new augmented view every step (the official protocol's mode); the
  # export and the folder on 1 rank with cached features: the same backbone, so the same classifier.
  run "$work/np2.console" mpirun -np 2 --oversubscribe "$lincls" "${base[@]}" model.pretrained="$work/pre" \
    lincls.cached_features=false lincls.standardize=false lincls.epochs=2 lincls.base_lr=3 lincls.schedule=cosine \
    train.output_dir="$work/np2"
  run "$work/folder.console" "$lincls" "${base[@]}" model.pretrained="$work/pre" lincls.epochs=2 train.output_dir="$work/folder"
  run "$work/file.console" "$lincls" "${base[@]}" model.pretrained="$work/pre.h5" lincls.epochs=2 train.output_dir="$work/file"
  for r in np2:$checkpoint folder:$checkpoint file:$work/pre.h5; do
    name=${r%%:*} source=${r#*:}
    grep -q "sanity check passed: all $vit_tensors backbone tensors are bitwise those of $source" "$work/$name.console" ||
      { cat "$work/$name.console"; fail "$name: no sanity check over the ViT's $vit_tensors tensors of $source"; }
    [ "$(grep -c '"event":"lincls"' "$work/$name/metrics.jsonl")" = 2 ] || fail "$name: expected 2 lincls rows"
    [ "$(field "$work/$name/metrics.jsonl" lincls_result sanity_tensors)" = $vit_tensors ] || fail "$name: sanity_tensors"
    [ "$(field "$work/$name/metrics.jsonl" lincls_result encoder)" = trained ] || fail "$name: encoder"
    grep -q "linear probe top-1 (trained: $source" "$work/$name.console" || fail "$name: no result line"
    echo "$name: top-1 $(field "$work/$name/metrics.jsonl" lincls_result last_top1)%"
  done
  grep -q "a new augmented view every step" "$work/np2.console" || fail "np2: not the augmented mode"
  # The random-init baseline of the same ViT: drawn again from train.seed for its sanity check.
  run "$work/random.console" "$lincls" "${base[@]}" model.pretrained=random lincls.epochs=1 train.output_dir="$work/random"
  grep -q "sanity check passed: all $vit_tensors backbone tensors are bitwise those of random init" "$work/random.console" ||
    fail "random: no sanity check over the ViT's tensors"
  [ "$(field "$work/random/metrics.jsonl" lincls_result encoder)" = random_init ] || fail "random: encoder"
  run "$work/diff.console" "$ckpt" diff "$work/folder" "$work/file" --ignore '^progress/train_seconds$'
  cat "$work/diff.console"
  # A ViT built for another image size does not fit (pos_embed): exit 2 naming the tensor, the file and
  # the keys that decide a ViT, before any folder is made.
  set +e
  out=$("$lincls" "${base[@]}" model.pretrained="$work/pre.h5" data.image_size=32 train.output_dir="$work/refused" 2>&1); rc=$?
  set -e
  echo "$out" | tail -2
  [ $rc = 2 ] || fail "exit $rc for a ViT of another image size, expected 2"
  grep -q "model.pretrained: $work/pre.h5 does not fit model.arch=vit_tiny_cpu data.image_size=32 .*tensor 'pos_embed' is 1x17x64 there, 1x65x64 here" <<<"$out" ||
    fail "the tensor, the file or the keys are not named"
  [ ! -e "$work/refused" ] || fail "an output folder was made"
  # A ResNet config on the ViT (issue 50 item 13): the architecture is the first reason named, from the
  # run's folder and from its export alike, not a key that only a ResNet has (the stem's stride,
  # whose default the ViT's saved config holds too, used to come first).
  for pretrained in "$work/pre" "$work/pre.h5"; do
    set +e
    out=$("$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.stem_stride=2 model.pretrained="$pretrained" \
      train.output_dir="$work/refused" 2>&1); rc=$?
    set -e
    echo "$out" | tail -1
    [ $rc = 2 ] || fail "$pretrained: exit $rc for a ResNet config on a ViT, expected 2"
    grep -q "does not fit model.arch=resnet_tiny .*: it was trained with model.arch=vit_tiny_cpu; the checkpoint was trained with model.arch=vit_tiny_cpu" <<<"$out" ||
      fail "$pretrained: the architecture is not the first reason"
  done
  [ ! -e "$work/refused" ] || fail "an output folder was made" ;;
*)
  fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
