#!/usr/bin/env bash
# moco_lincls and moco_dist --eval-only end to end, on a MoCo run of tests/fixtures/tiny_synthetic.yaml
# made first. One case per ctest entry:
#   lincls_cli_test.sh CASE BUILD_DIR WORK_DIR
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
# The pre-training run whose checkpoint the cases evaluate (4 steps).
run "$work/pre.console" "$dist" --config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 train.output_dir="$work/pre" ckpt.every_minutes=0
config=(--config "$src/tests/fixtures/tiny_lincls.yaml")  # a key given twice is refused: model.pretrained once
base=("${config[@]}" model.pretrained="$work/pre")

# field FILE EVENT KEY [ENCODER]: the value of KEY in the last row of EVENT (with that encoder).
field() {
  "$py" - "$@" <<'PY'
import json, sys
path, event, key = sys.argv[1:4]
rows = [json.loads(l) for l in open(path)]
rows = [r for r in rows if r["event"] == event and (len(sys.argv) < 5 or r.get("encoder") == sys.argv[4])]
print(rows[-1][key])
PY
}

case $case_name in
cached_np1_np2)
  # Cached features on 1 and on 2 ranks: one row per epoch, the sanity check, and the same classifier
  # (the ranks' gradients are averaged; only the summation order differs).
  run "$work/np1.console" "$lincls" "${base[@]}" train.output_dir="$work/np1"
  run "$work/np2.console" mpirun -np 2 --oversubscribe "$lincls" "${base[@]}" train.output_dir="$work/np2"
  for r in np1 np2; do
    grep -q "sanity check passed: all [0-9]* backbone tensors are bitwise those of $work/pre/checkpoints/step_00000004" "$work/$r.console" ||
      fail "$r: no sanity check line"
    [ "$(grep -c '"event":"lincls"' "$work/$r/metrics.jsonl")" = 4 ] || fail "$r: expected 4 lincls rows"
    [ "$(field "$work/$r/metrics.jsonl" lincls_result sanity_tensors)" -gt 0 ] || fail "$r: no tensors checked"
  done
  run "$work/diff.console" "$ckpt" diff "$work/np1" "$work/np2" --atol 1e-5 --ignore '^progress/(train_seconds|epoch_loss_sum)$'
  cat "$work/diff.console"
  a=$(field "$work/np1/metrics.jsonl" lincls_result last_top1) b=$(field "$work/np2/metrics.jsonl" lincls_result last_top1)
  [ "$a" = "$b" ] || fail "top-1 $a on 1 rank, $b on 2" ;;
full_np2)
  # A new augmented view every step, on 2 ranks: the frozen backbone (eval mode) is bitwise the
  # checkpoint's at the end, BatchNorm statistics included.
  run "$work/console" mpirun -np 2 --oversubscribe "$lincls" "${base[@]}" lincls.cached_features=false lincls.standardize=false \
    lincls.epochs=2 lincls.base_lr=30 train.output_dir="$work/run"
  grep -q "sanity check passed" "$work/console" || fail "no sanity check line"
  grep -q "a new augmented view every step" "$work/console" || fail "not the augmented mode"
  [ "$(grep -c '"event":"lincls"' "$work/run/metrics.jsonl")" = 2 ] || fail "expected 2 lincls rows" ;;
resume_bitwise)
  # Stopped mid-epoch (step 6 of 16 per epoch), then at step 20, then to the end: every tensor of the
  # final checkpoint and every epoch's top-1 equal the uninterrupted run's, bit for bit.
  args=("${base[@]}" lincls.cached_features=false lincls.epochs=3 ckpt.async=false)
  run "$work/a.console" "$lincls" "${args[@]}" train.output_dir="$work/a"
  run "$work/b1.console" "$lincls" "${args[@]}" train.output_dir="$work/b" train.stop_at_step=6
  grep -q "stopped after step 6" "$work/b1.console" || fail "did not stop at step 6"
  run "$work/b2.console" "$lincls" "${args[@]}" train.output_dir="$work/b" train.stop_at_step=20
  run "$work/b3.console" "$lincls" "${args[@]}" train.output_dir="$work/b"
  [ "$(grep -c '"event":"resume"' "$work/b/metrics.jsonl")" = 2 ] || fail "expected 2 resume rows"
  run "$work/diff.console" "$ckpt" diff "$work/a" "$work/b" --ignore '^progress/train_seconds$'
  cat "$work/diff.console"
  "$py" - "$work/a/metrics.jsonl" "$work/b/metrics.jsonl" <<'PY'
import json, sys
top = [[(r["epoch"], r["top1"], r["top5"], r["loss"]) for r in map(json.loads, open(p)) if r["event"] == "lincls"] for p in sys.argv[1:]]
print(top)
sys.exit(0 if top[0] == top[1] and len(top[0]) == 3 else "the epochs' results differ")
PY
  ;;
partial_batch)
  # main_lincls.py keeps each epoch's last partial batch (drop_last=False). 500 images in batches of
  # 32: 15 full batches and one of 20, so 16 steps an epoch on 1 rank and on 2 (250 a rank, the last
  # 10 each); 501 on 2 ranks: padded to 502 (251 a rank), 16 steps. Cached features on 1 and 2 ranks
  # give the same classifier; stopped just before the last partial batch (step 15) and resumed, the
  # augmented mode ends bitwise as the uninterrupted run.
  unsized=("${base[@]}" lincls.epochs=2 ckpt.async=false)
  part=("${unsized[@]}" data.synthetic_train_size=500)
  run "$work/np1.console" "$lincls" "${part[@]}" train.output_dir="$work/np1"
  run "$work/np2.console" mpirun -np 2 --oversubscribe "$lincls" "${part[@]}" train.output_dir="$work/np2"
  run "$work/odd.console" mpirun -np 2 --oversubscribe "$lincls" "${unsized[@]}" data.synthetic_train_size=501 train.output_dir="$work/odd"
  for r in np1 np2 odd; do
    steps=$("$py" -c 'import json, sys; print([r["step"] for r in map(json.loads, open(sys.argv[1])) if r["event"] == "lincls"])' "$work/$r/metrics.jsonl")
    [ "$steps" = "[16, 32]" ] || fail "$r: steps at the epochs' ends $steps, expected [16, 32]"
  done
  run "$work/diff.console" "$ckpt" diff "$work/np1" "$work/np2" --atol 1e-5 --ignore '^progress/(train_seconds|epoch_loss_sum)$'
  cat "$work/diff.console"
  aug=("${part[@]}" lincls.cached_features=false)
  run "$work/a.console" "$lincls" "${aug[@]}" train.output_dir="$work/a"
  run "$work/b1.console" "$lincls" "${aug[@]}" train.output_dir="$work/b" train.stop_at_step=15
  grep -q "stopped after step 15" "$work/b1.console" || fail "did not stop at step 15"
  run "$work/b2.console" "$lincls" "${aug[@]}" train.output_dir="$work/b"
  grep -q "continuing at epoch 0 batch 15 (step 15)" "$work/b2.console" || fail "did not resume at the last batch"
  run "$work/resume_diff.console" "$ckpt" diff "$work/a" "$work/b" --ignore '^progress/train_seconds$'
  cat "$work/resume_diff.console"
  "$py" - "$work/a/metrics.jsonl" "$work/b/metrics.jsonl" <<'PY'
import json, sys
rows = [[(r["epoch"], r["step"], r["top1"], r["loss"]) for r in map(json.loads, open(p)) if r["event"] == "lincls"] for p in sys.argv[1:]]
print(rows)
sys.exit(0 if rows[0] == rows[1] and len(rows[0]) == 2 else "the epochs' results differ")
PY
  ;;
other_arch)
  # A checkpoint of another width: exit 2 naming the tensor and the checkpoint, before any folder is made.
  set +e
  out=$("$lincls" "${base[@]}" model.width=0.5 train.output_dir="$work/run" 2>&1); rc=$?
  set -e
  echo "$out"
  [ $rc = 2 ] || fail "exit $rc, expected 2"
  grep -q "tensor 'conv1.weight' is 16x1x3x3 there, 32x1x3x3 here" <<<"$out" || fail "the tensor is not named"
  grep -q "model.arch=resnet_tiny model.small_stem=true model.stem_stride=1 model.width=0.25" <<<"$out" || fail "the checkpoint's own model is not named"
  [ ! -e "$work/run" ] || fail "an output folder was made"
  # Another stem stride changes no tensor's shape: the checkpoint's config, and an export's copy of
  # it, refuse it all the same.
  run "$work/export.console" "$ckpt" export "$work/pre" "$work/pre.h5"
  for pretrained in "$work/pre" "$work/pre.h5"; do
    set +e
    out=$("$lincls" "${config[@]}" model.pretrained="$pretrained" model.stem_stride=2 train.output_dir="$work/run" 2>&1); rc=$?
    set -e
    echo "$out"
    [ $rc = 2 ] || fail "$pretrained: exit $rc with another stem stride, expected 2"
    grep -q "model.stem_stride=2 .*it was trained with model.stem_stride=1" <<<"$out" || fail "$pretrained: the stride is not named"
  done
  [ ! -e "$work/run" ] || fail "an output folder was made" ;;
pinned_backbone)
  # A linear probe resumes on the backbone it started on (issue 50 item 1): model.pretrained names a
  # run folder whose `latest` moves on while the probe is stopped; the resume reads the checkpoint the
  # first start read (its path and tensors' hash are in the probe's checkpoints) and ends bitwise as
  # a probe of that checkpoint alone. A pinned checkpoint that is gone, or an export written over,
  # is refused: exit 2 naming both paths, the probe's folder untouched.
  pre=(--config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 ckpt.every_minutes=0 train.output_dir="$work/pre3")
  run "$work/pre3a.console" "$dist" "${pre[@]}" train.stop_at_step=3
  args=("${config[@]}" model.pretrained="$work/pre3" ckpt.async=false)
  run "$work/a1.console" "$lincls" "${args[@]}" train.output_dir="$work/a" train.stop_at_step=20
  run "$work/pre3b.console" "$dist" "${pre[@]}"  # on to step 4: `latest` names step 4 now
  run "$work/a2.console" "$lincls" "${args[@]}" train.output_dir="$work/a"
  step3=$work/pre3/checkpoints/step_00000003 step4=$work/pre3/checkpoints/step_00000004
  grep -q "model.pretrained=$work/pre3 now names $step4; this run started on $step3 and goes on with it" "$work/a2.console" ||
    { cat "$work/a2.console"; fail "the resume does not say it keeps step 3"; }
  grep -q "sanity check passed: all [0-9]* backbone tensors are bitwise those of $step3 (step 3)" "$work/a2.console" ||
    fail "the resume did not read step 3"
  [ "$(field "$work/a/metrics.jsonl" lincls_result pretrained)" = "$step3 (step 3)" ] || fail "the result is not labelled step 3"
  run "$work/b.console" "$lincls" "${config[@]}" model.pretrained="$step3" ckpt.async=false train.output_dir="$work/b"
  run "$work/diff.console" "$ckpt" diff "$work/a" "$work/b" --ignore '^progress/train_seconds$'
  cat "$work/diff.console"
  # Pinned to step 4 (`latest` now), then step 4 deleted by the pre-training run's retention.
  run "$work/c1.console" "$lincls" "${args[@]}" train.output_dir="$work/c" train.stop_at_step=20
  run "$work/pre3c.console" "$dist" "${pre[@]}" train.epochs=0.5 ckpt.keep_last=1
  [ ! -e "$step4" ] && [ -d "$work/pre3/checkpoints/step_00000008" ] || fail "the retention did not delete step 4"
  (cd "$work/c" && find . -type f | sort | xargs md5sum) >"$work/c.before"
  set +e
  out=$("$lincls" "${args[@]}" train.output_dir="$work/c" 2>&1); rc=$?
  set -e
  echo "$out" | tail -2
  [ $rc = 2 ] || fail "exit $rc resuming on a pinned checkpoint that is gone, expected 2"
  grep -q "started on $step4, as its checkpoint $work/c/checkpoints/step_00000020 records, and a resume must read the same backbone: $step4 is gone; model.pretrained=$work/pre3 now names $work/pre3/checkpoints/step_00000008" <<<"$out" ||
    fail "the refusal does not name both paths"
  (cd "$work/c" && find . -type f | sort | xargs md5sum) | diff - "$work/c.before" || fail "the refusal changed the probe's folder"
  # An export written over while the probe is stopped: the same path, other tensors.
  run "$work/export1.console" "$ckpt" export "$work/pre3" "$work/pre.h5"
  run "$work/d1.console" "$lincls" "${config[@]}" model.pretrained="$work/pre.h5" train.output_dir="$work/d" train.stop_at_step=20
  run "$work/export2.console" "$ckpt" export "$work/pre" "$work/pre.h5" --force
  set +e
  out=$("$lincls" "${config[@]}" model.pretrained="$work/pre.h5" train.output_dir="$work/d" 2>&1); rc=$?
  set -e
  echo "$out" | tail -2
  [ $rc = 2 ] || fail "exit $rc resuming on an export written over, expected 2"
  grep -q "started on $work/pre.h5, .*its backbone tensors hash [0-9a-f]\{16\} now, [0-9a-f]\{16\} when the run started; model.pretrained=$work/pre.h5 now names $work/pre.h5" <<<"$out" ||
    fail "the refusal does not name the export and its hashes" ;;
baselines)
  # The raw pixels and the random init under the same protocol: the synthetic classes are linearly
  # separable in pixel space, so the raw-pixel probe must reach high accuracy.
  run "$work/raw.console" "$lincls" "${config[@]}" model.pretrained=raw_pixels train.output_dir="$work/raw"
  run "$work/rnd.console" "$lincls" "${config[@]}" model.pretrained=random train.output_dir="$work/rnd"
  [ "$(field "$work/raw/metrics.jsonl" lincls_result encoder)" = raw_pixels ] || fail "raw: wrong encoder"
  [ "$(field "$work/rnd/metrics.jsonl" lincls_result encoder)" = random_init ] || fail "random: wrong encoder"
  grep -q "sanity check passed" "$work/rnd.console" || fail "random: no sanity check"
  "$py" -c "import sys; t = float(sys.argv[1]); print('raw-pixel top-1', t); sys.exit(0 if t >= 95 else 'below 95%')" \
    "$(field "$work/raw/metrics.jsonl" lincls_result best_top1)" ;;
eval_only)
  # moco_dist --eval-only scores a checkpoint, the random init and the raw pixels exactly as the
  # training run did (its metrics.jsonl), writing nothing.
  [ "$(grep -c '"encoder":"raw_pixels"' "$work/pre/metrics.jsonl")" = 1 ] || fail "the run has no raw_pixels row"
  grep -q "kNN top-1: raw pixels [0-9.]*%, random init [0-9.]*%, trained [0-9.]*% after 4 steps" "$work/pre.console" ||
    fail "the run's final line lacks the raw pixels"
  ls "$work/pre" >"$work/before"
  for what in trained random_init raw_pixels; do
    case $what in trained) p="$work/pre" ;; random_init) p=random ;; raw_pixels) p=raw_pixels ;; esac
    run "$work/$what.console" "$dist" --config "$src/tests/fixtures/tiny_synthetic.yaml" --eval-only train.threads=1 \
      train.output_dir="$work/pre" model.pretrained="$p"
    cat "$work/$what.console"
    want=$("$py" -c "import sys; print('%.2f' % float(sys.argv[1]))" "$(field "$work/pre/metrics.jsonl" knn top1 $what)")
    grep -q "kNN top-1: .*$what $want%" "$work/$what.console" || fail "$what: expected $want%"
  done
  ls "$work/pre" | diff - "$work/before" || fail "--eval-only wrote into the run's folder" ;;
*)
  fail "unknown case $case_name" ;;
esac
echo "PASS $case_name"
