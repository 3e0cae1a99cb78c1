#!/usr/bin/env bash
# The training loop's own promises, checked in what a run leaves (metrics.jsonl), against oracles
# computed here from the config alone. One case per ctest entry:
#   train_cli_test.sh CASE BUILD_DIR WORK_DIR
set -euo pipefail
case_name=$1 build=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist py=/usr/bin/python3
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
base=(--config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 knn.memory_size=128 knn.query_size=64 ckpt.every_minutes=0)

case $case_name in
knn_every_epochs)
  # 128 images in batches of 32: 4 steps an epoch, 3 epochs. kNN of the raw pixels and the encoder
  # before training (scored with the first evaluation, recorded at step 0), after epochs 1 and 2
  # (every 1), and after training (epoch 3, not twice); with every 2: after epoch 2 and at the end.
  for every in 1 2; do
    "$dist" "${base[@]}" data.synthetic_train_size=128 train.epochs=3 knn.every_epochs=$every train.output_dir="$work/every$every" >"$work/every$every.console" 2>&1 ||
      { cat "$work/every$every.console"; exit 1; }
    "$py" - "$work/every$every/metrics.jsonl" "$every" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
knn = [(r["encoder"], r["step"], r["epoch"]) for r in rows if r["event"] == "knn"]
expected = {"1": [("raw_pixels", 0, 0), ("random_init", 0, 0), ("trained", 4, 1), ("trained", 8, 2), ("trained", 12, 3)],
            "2": [("raw_pixels", 0, 0), ("random_init", 0, 0), ("trained", 8, 2), ("trained", 12, 3)]}[sys.argv[2]]
print("knn rows:", knn)
# The baselines come with the first kNN evaluation, after the first step: it waits for none of them.
first = [r["event"] for r in rows if r["event"] in ("train", "knn")][0]
if first != "train": sys.exit(f"a kNN row came before the first step's")
sys.exit(0 if knn == expected else f"expected {expected}")
PY
  done ;;
evaluation_neutral)
  # Evaluating changes nothing of training: a run that scores the kNN monitor (and, with its first
  # evaluation, the baselines, the random init from the initial weights lent to the encoder and
  # given back) after every epoch trains bitwise as one that evaluates only at its end.
  for every in 0 1; do
    "$dist" "${base[@]}" data.synthetic_train_size=128 train.epochs=3 knn.every_epochs=$every train.output_dir="$work/every$every" \
      >"$work/every$every.console" 2>&1 ||
      { cat "$work/every$every.console"; exit 1; }
  done
  grep -q '"encoder":"trained","epoch":1.0' "$work/every1/metrics.jsonl" || { echo "FAIL: no kNN after epoch 1"; exit 1; }
  for run in every0 every1; do grep '"event":"train"' "$work/$run/metrics.jsonl" | grep -o '"loss":[^,]*' >"$work/$run.losses"; done
  [ "$(wc -l <"$work/every0.losses")" -eq 12 ] || { echo "FAIL: expected 12 steps"; exit 1; }
  cmp "$work/every0.losses" "$work/every1.losses" || { diff "$work/every0.losses" "$work/every1.losses"; echo "FAIL: the losses differ"; exit 1; }
  "$build/moco_ckpt" diff "$work/every0" "$work/every1" --ignore '^progress/train_seconds$' || { echo "FAIL: the final checkpoints differ"; exit 1; }
  ;;
random_init_after_resume)
  # The random-init baseline is scored with the first kNN evaluation, from the encoder's weights as
  # initialised. A run stopped before it and resumed scores the same weights (copied before the
  # resume loads the trained ones): its figure equals an uninterrupted run's and differs from the
  # trained weights' at the stop (which a copy taken after the resume would give). Fashion-MNIST, where
  # the figure moves with the weights (synthetic images give 100% to any encoder).
  fm=(--config "$src/configs/fashion_mnist_quick.yaml" train.threads=1 train.epochs=0.02 train.log_every=5
      knn.memory_size=2000 knn.query_size=1000 ckpt.every_minutes=0)
  "$dist" "${fm[@]}" train.output_dir="$work/straight" >"$work/straight.console" 2>&1 || { cat "$work/straight.console"; exit 1; }
  "$dist" "${fm[@]}" train.output_dir="$work/sliced" train.stop_at_step=4 >"$work/sliced1.console" 2>&1 || { cat "$work/sliced1.console"; exit 1; }
  ! grep -q '"random_init"' "$work/sliced/metrics.jsonl" || { echo "FAIL: scored before the first evaluation"; exit 1; }
  "$dist" "${fm[@]}" --eval-only model.pretrained="$work/sliced" train.output_dir="$work/sliced" >"$work/at_stop.console" 2>&1 ||
    { cat "$work/at_stop.console"; exit 1; }
  "$dist" "${fm[@]}" train.output_dir="$work/sliced" >"$work/sliced2.console" 2>&1 || { cat "$work/sliced2.console"; exit 1; }
  "$py" - "$work" <<'PY'
import json, re, sys
def random_init(run):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl")]
    found = [r["top1"] for r in rows if r["event"] == "knn" and r["encoder"] == "random_init"]
    assert len(found) == 1, f"{run}: random_init rows {found}"
    return found[0]
straight, sliced = random_init("straight"), random_init("sliced")
at_stop = float(re.search(r"trained ([0-9.]+)%", open(f"{sys.argv[1]}/at_stop.console").read()).group(1))
print(f"random init: uninterrupted {straight}%, stopped at step 4 and resumed {sliced}%; the weights at step 4: {at_stop:.2f}%")
assert sliced == straight, "the resumed run scored other weights than the initial ones"
assert abs(at_stop - straight) >= 0.01, "the case cannot tell the initial weights from step 4's: choose other sizes"
PY
  ;;
time_budget)
  # An epoch count the run could never finish (16 steps an epoch, 1.6M steps): the 2 s budget ends it,
  # and the cosine schedule runs over the budget. Step i's lr is computed from the progress before
  # it: p = max(steps done / total steps, rank 0's training seconds so far / budget). Every step
  # (optim.lr_update=step) at p x epochs; once per epoch (epoch) at the budget's whole epochs
  # floor(p x epochs), or the loop's epoch if ahead.
  for update in step epoch; do
    "$dist" "${base[@]}" train.epochs=100000 train.time_budget_s=2 optim.lr_update=$update train.output_dir="$work/$update" >"$work/$update.console" 2>&1 ||
      { cat "$work/$update.console"; exit 1; }
    "$py" - "$work/$update/metrics.jsonl" "$update" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
per_step = sys.argv[2] == "step"
train = [r for r in rows if r["event"] == "train"]
budget, epochs, total, peak = 2.0, 100000, 100000 * 16, 0.06 * 32 / 256
cosine = lambda e: peak * 0.5 * (1 + math.cos(math.pi * min(1.0, e / epochs)))
assert [r["step"] for r in train] == list(range(1, len(train) + 1)), "a step was not logged"
elapsed_before = 0.0
for r in train:
    p = max((r["step"] - 1) / total, elapsed_before / budget)
    if per_step:
        ok = math.isclose(r["lr"], cosine(p * epochs), rel_tol=1e-9, abs_tol=1e-15)
    else:  # elapsed_s as logged may round across an epoch's share of the budget: either neighbour
        whole = max((r["step"] - 1) // 16, math.floor(p * epochs))
        near = [whole] + ([whole - 1, whole + 1] if abs(p * epochs - round(p * epochs)) < 1e-6 else [])
        ok = any(r["lr"] == cosine(e) for e in near)
    assert ok, f"step {r['step']}: lr {r['lr']} (progress {p}, {sys.argv[2]})"
    elapsed_before = r["elapsed_s"]
last, before_last = train[-1], train[-2]
assert last["elapsed_s"] >= budget > before_last["elapsed_s"], f"stopped at {last['elapsed_s']}s, before that {before_last['elapsed_s']}s"
assert train[len(train) // 2]["lr"] < peak, "the lr did not follow the budget"
knn = [r for r in rows if r["event"] == "knn" and r["encoder"] == "trained"]
assert len(knn) == 1 and knn[0]["step"] == last["step"], "no final kNN"
print(f"{sys.argv[2]}: {len(train)} steps in {last['elapsed_s']:.3f}s of a {budget}s budget, "
      f"{len(set(r['lr'] for r in train))} lrs; every lr follows the budget's progress")
PY
  done ;;
lr_update)
  # 128 images in batches of 32: 4 steps an epoch, 3 epochs, cosine. optim.lr_update=epoch: step i's
  # lr is main_moco.py's adjust_learning_rate at the integer epoch (i-1)//4, also when the run stops
  # at step 6 (mid-epoch) and resumes; step: the cosine at (i-1)/4 epochs.
  short=("${base[@]}" data.synthetic_train_size=128 train.epochs=3)
  for run in "epoch full" "step full" "epoch stop"; do
    set -- $run
    extra=(); [ "$2" = stop ] && extra=(train.stop_at_step=6)
    "$dist" "${short[@]}" optim.lr_update=$1 "${extra[@]}" train.output_dir="$work/$1_$2" >"$work/$1_$2.console" 2>&1 ||
      { cat "$work/$1_$2.console"; exit 1; }
  done
  "$dist" "${short[@]}" optim.lr_update=epoch train.output_dir="$work/epoch_stop" >"$work/resumed.console" 2>&1 ||
    { cat "$work/resumed.console"; exit 1; }
  "$py" - "$work" <<'PY'
import json, math, sys
def lrs(name):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}/metrics.jsonl")]
    return {r["step"]: r["lr"] for r in rows if r["event"] == "train"}  # a resumed step: its last row
peak, epochs = 0.06 * 32 / 256, 3
main_moco = lambda epoch: peak * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
once, every, resumed = lrs("epoch_full"), lrs("step_full"), lrs("epoch_stop")
assert sorted(once) == list(range(1, 13)), f"steps {sorted(once)}"
for step, lr in once.items():
    assert abs(lr - main_moco((step - 1) // 4)) <= 1e-15, f"epoch: step {step} lr {lr}, main_moco.py {main_moco((step - 1) // 4)}"
    assert abs(every[step] - main_moco((step - 1) / 4)) <= 1e-15, f"step: step {step} lr {every[step]}"
assert resumed == once, f"resumed at step 6: {resumed}, uninterrupted {once}"
print("epoch:", [once[s] for s in sorted(once)], "\nstep:", [every[s] for s in sorted(every)], "\nthe resumed run's lrs equal the uninterrupted run's")
PY
  ;;
world_group_at_one)
  # dist.world_group_at_one: a world of one through the MPI group (NCCL on CUDA) runs the collectives
  # of several ranks (the reducer's buckets and hooks, the BatchNorm broadcast, the key shuffle's
  # all-to-all: counted by WorldOfOneTest.*) and trains exactly as with no communication: the same
  # losses and final checkpoint, bit for bit. With one BatchNorm group (the shuffle kept only by the
  # switch) and with two (shuffled anyway).
  for splits in 1 2; do
    for group in false true; do
      run=$work/splits$splits-$group
      "$dist" "${base[@]}" train.epochs=1 moco.bn_splits=$splits dist.world_group_at_one=$group train.output_dir="$run" >"$run.console" 2>&1 ||
        { cat "$run.console"; exit 1; }
    done
    grep -q "collectives: none (a world of one" "$work/splits$splits-false/rank0.log"
    grep -q "collectives: MPI across 1 rank(s)" "$work/splits$splits-true/rank0.log" || { cat "$work/splits$splits-true/rank0.log"; exit 1; }
    "$py" - "$work/splits$splits-false/metrics.jsonl" "$work/splits$splits-true/metrics.jsonl" "$splits" <<'PY'
import json, sys
local, world = ([r for r in map(json.loads, open(p)) if r["event"] == "train"] for p in sys.argv[1:3])
assert local and [r["loss"] for r in local] == [r["loss"] for r in world], f"losses differ: local group {local}, MPI group {world}"
# The reducer's bytes: all of the gradients through the group with the switch, nothing without.
assert all(r["grad_bytes_per_step"] == 0 for r in local), [r["grad_bytes_per_step"] for r in local]
assert all(r["grad_bytes_per_step"] > 0 for r in world), [r["grad_bytes_per_step"] for r in world]
print(f"moco.bn_splits={sys.argv[3]}: {len(local)} losses bitwise equal with the local and the MPI group, "
      f"{world[-1]['grad_bytes_per_step']} gradient bytes a step reduced through the latter")
PY
    "$build/moco_ckpt" diff "$work/splits$splits-false" "$work/splits$splits-true" --ignore '^progress/train_seconds$'
  done
  ;;
bn_buffers_np2)
  # Two ranks, the replica check every step: the BN buffers each rank starts a step with are rank
  # 0's (dist.broadcast_buffers); without the broadcast the run stops naming the rank.
  mpirun -np 2 --oversubscribe "$dist" "${base[@]}" dist.queue_check_every=1 train.output_dir="$work/run" >"$work/console" 2>&1 ||
    { cat "$work/console"; exit 1; }
  grep -q '"encoder":"trained"' "$work/run/metrics.jsonl"
  # With rank-local buffers the check leaves them alone, and the checkpoint keeps each rank's.
  mpirun -np 2 --oversubscribe "$dist" "${base[@]}" dist.queue_check_every=1 dist.broadcast_buffers=false train.output_dir="$work/local" >"$work/local.console" 2>&1 ||
    { cat "$work/local.console"; exit 1; }
  grep -q '"encoder":"trained"' "$work/local/metrics.jsonl" ;;
check_step_syncs_np2)
  # debug.check_step_syncs on two ranks with the replica check every 2 steps (steps 2, 4, 6, 8; 4
  # and 8 log): a counted host read inside a step is an error on the CPU too, so this fails if the
  # check steps' BatchNorm hash or anything else reads the device before the step's end.
  mpirun -np 2 --oversubscribe "$dist" "${base[@]}" train.epochs=0.5 train.log_every=4 knn.raw_baseline=false \
    debug.check_step_syncs=true dist.queue_check_every=2 train.output_dir="$work/run" >"$work/console" 2>&1 ||
    { cat "$work/console"; exit 1; }
  grep -Eq '"event":"train",.*"step":8[,}]' "$work/run/metrics.jsonl" && grep -q '"encoder":"trained"' "$work/run/metrics.jsonl" ;;
imagefolder_np1_np2)
  # configs/imagefolder_quick.yaml on a generated ImageFolder (JPEG, greyscale JPEG, PNG, sizes
  # 48-160 px) with two broken files in train/: on 1 and 2 ranks the run trains, evaluates, and
  # logs each broken file with its path instead of crashing or feeding a black image.
  "$py" "$src/tools/make_image_folder.py" "$work/data" --classes 4 --train 16 --val 4 --corrupt 2
  for np in 1 2; do
    run=(--config "$src/configs/imagefolder_quick.yaml" data.root="$work/data" train.threads=1 train.epochs=$((3 - np)) ckpt.every_minutes=0
         train.output_dir="$work/np$np")
    if [ $np -eq 1 ]; then "$dist" "${run[@]}" >"$work/np$np.console" 2>&1 || { cat "$work/np$np.console"; exit 1; }
    else mpirun -np 2 --oversubscribe "$dist" "${run[@]}" data.workers=1 >"$work/np$np.console" 2>&1 || { cat "$work/np$np.console"; exit 1; }; fi
    for k in 0 1; do
      grep -q "skipping unreadable image $work/data/train/class_0$k/corrupt_$k.jpg" "$work/np$np.console" "$work/np$np"/rank*.log ||
        { cat "$work/np$np.console"; echo "corrupt_$k.jpg not logged" >&2; exit 1; }
    done
    # the epoch summary counts them (one rank: it met both while scoring the raw pixels), after the
    # method's scalars for that line (MoCo's acc@1, not acc@5: run::StepScalar::in_epoch_line)
    [ $np -eq 2 ] || grep -Eq "epoch 1 done: mean loss [0-9.]+, acc@1 [0-9.]+% over [0-9]+ step\(s\); .*; 2 unreadable image file\(s\) skipped by this rank" "$work/np$np.console" ||
      { cat "$work/np$np.console"; echo "the epoch summary: not its mean loss and acc@1 alone, or not the skipped files" >&2; exit 1; }
    "$py" - "$work/np$np/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["event"] == "train"]
knn = {r["encoder"]: r["top1"] for r in rows if r["event"] == "knn"}
assert train and all(math.isfinite(r["loss"]) for r in train), "no finite training steps"
assert {"raw_pixels", "random_init", "trained"} <= set(knn), f"kNN rows: {knn}"
print(f"{len(train)} steps, loss {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f}, kNN {knn}")
PY
  done ;;
v3_r50_config_np2)
  # configs/moco_v3_r50_imagenet.yaml (LARS, warm-up, the momentum's cosine) on 2 ranks with small
  # overrides, the online probe on: it trains and evaluates; the first loss is that of random keys
  # among the 16 gathered from both ranks, 2 x 2T ln 16 (8 per rank would give 2 x 2T ln 8 = 8.3);
  # the lr rises from 0 over the warm-up epoch and falls after it.
  "$py" "$src/tools/make_image_folder.py" "$work/data" --classes 4 --train 24 --val 8
  # The recipe's fp16 is CUDA's: on this CPU it is refused before anything is written, naming the key.
  # (Its whole batch of 4096 on one rank would be refused first, by the memory estimate: 16 here.)
  rc=0
  "$dist" --config "$src/configs/moco_v3_r50_imagenet.yaml" data.root="$work/data" optim.batch_size=16 \
    train.output_dir="$work/fp16" \
    >"$work/fp16.console" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] && grep -q "key 'train.precision' fp16 needs a CUDA device, and this rank's is cpu" "$work/fp16.console" &&
    [ ! -e "$work/fp16" ] || { cat "$work/fp16.console"; echo "fp16 on a CPU: exit $rc"; exit 1; }
  mpirun -np 2 --oversubscribe "$dist" --config "$src/configs/moco_v3_r50_imagenet.yaml" data.root="$work/data" \
    model.arch=resnet_tiny model.small_stem=true data.image_size=32 optim.batch_size=16 model.dim=32 v3.mlp_dim=64 \
    train.precision=fp32 train.epochs=3 optim.warmup_epochs=1 knn.memory_size=0 knn.query_size=0 knn.k=5 data.workers=1 train.threads=1 \
    eval.online_probe=true eval.probe_val_size=0 ckpt.every_minutes=0 train.log_every=1 train.output_dir="$work/run" >"$work/run.console" 2>&1 ||
    { cat "$work/run.console"; exit 1; }
  "$py" - "$work/run/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["event"] == "train"]
knn = {r["encoder"] for r in rows if r["event"] == "knn"}
assert len(train) == 18 and all(math.isfinite(r["loss"]) for r in train), f"{len(train)} steps"
expected = 2 * 2 * 1.0 * math.log(16)
assert abs(train[0]["loss"] - expected) < 0.5, f"first loss {train[0]['loss']} is not ~{expected:.2f}"
lrs = [r["lr"] for r in train]
assert lrs[0] == 0 and lrs[5] > lrs[1] > 0 and lrs[-1] < lrs[6], f"lr {lrs}"
assert {"raw_pixels", "random_init", "trained"} <= knn, f"kNN rows: {knn}"
assert any(r["event"] == "probe" for r in rows), "no online-probe row"
print(f"{len(train)} steps, loss {train[0]['loss']:.3f} (random keys: {expected:.3f}) -> {train[-1]['loss']:.3f}")
PY
  # The query backbone exports under torchvision's names, without the projector (fc.*).
  "$build/moco_ckpt" export "$work/run" "$work/backbone.pth" --format torch
  "$py" -c "import sys, torch; sd = torch.load(sys.argv[1]); assert 'conv1.weight' in sd and not [k for k in sd if k.startswith('fc.')], sorted(sd)" "$work/backbone.pth"
  # The same in bf16 (train.precision): the encoders and heads under autocast, finite losses.
  mpirun -np 2 --oversubscribe "$dist" --config "$src/configs/moco_v3_r50_imagenet.yaml" data.root="$work/data" \
    model.arch=resnet_tiny model.small_stem=true data.image_size=32 optim.batch_size=16 model.dim=32 v3.mlp_dim=64 \
    train.epochs=1 optim.warmup_epochs=0.5 knn.memory_size=0 knn.query_size=0 knn.k=5 data.workers=1 train.threads=1 \
    train.precision=bf16 ckpt.every_minutes=0 train.log_every=1 train.output_dir="$work/bf16" >"$work/bf16.console" 2>&1 ||
    { cat "$work/bf16.console"; exit 1; }
  grep -q "rank(s) on cpu, lars, bf16 autocast" "$work/bf16.console" || { cat "$work/bf16.console"; exit 1; }
  "$py" -c "import json, math, sys; t = [json.loads(l) for l in open(sys.argv[1])]; t = [r['loss'] for r in t if r['event'] == 'train']; assert len(t) == 6 and all(map(math.isfinite, t)), t" "$work/bf16/metrics.jsonl"
  ;;
v3_vit_small_config_np2)
  # configs/moco_v3_vit_small_imagenet.yaml (vit_small itself: 12 blocks of 12 heads, AdamW,
  # stop-grad-conv1, the 3-layer projector) on 2 ranks with small overrides: 32 px images (a 2x2 grid of
  # 16 px patches), small heads, 6 steps. It trains with finite losses, the lr warms up and falls,
  # kNN and the online probe read its cls-token features, and its export loads into a timm-layout ViT.
  "$py" "$src/tools/make_image_folder.py" "$work/data" --classes 4 --train 24 --val 8
  mpirun -np 2 --oversubscribe "$dist" --config "$src/configs/moco_v3_vit_small_imagenet.yaml" data.root="$work/data" \
    train.precision=fp32 data.image_size=32 optim.batch_size=16 model.dim=32 v3.mlp_dim=64 train.epochs=1 optim.warmup_epochs=0.5 \
    knn.memory_size=0 knn.query_size=0 knn.k=5 data.workers=1 train.threads=1 eval.online_probe=true \
    eval.probe_val_size=0 ckpt.every_minutes=0 train.log_every=1 train.output_dir="$work/run" >"$work/run.console" 2>&1 ||
    { cat "$work/run.console"; exit 1; }
  "$py" - "$work/run/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["event"] == "train"]
knn = {r["encoder"] for r in rows if r["event"] == "knn"}
assert len(train) == 6 and all(math.isfinite(r["loss"]) for r in train), f"{len(train)} steps"
lrs = [r["lr"] for r in train]
assert lrs[0] == 0 and lrs[2] > lrs[1] > 0 and lrs[-1] < lrs[3], f"lr {lrs}"
assert {"raw_pixels", "random_init", "trained"} <= knn, f"kNN rows: {knn}"
assert any(r["event"] == "probe" for r in rows), "no online-probe row"
print(f"{len(train)} steps, loss {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f}, lr {lrs}")
PY
  # The query backbone exports under timm's names without the head (the projector), as the official
  # main_lincls.py loads it: every key into a ViT-S/16 of timm's layout (the parity test's), strictly.
  "$build/moco_ckpt" export "$work/run" "$work/backbone.pth" --format torch
  "$py" - "$work/backbone.pth" "$src/tests/parity" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[2])
from moco_v3_step_parity import VisionTransformer
sd = torch.load(sys.argv[1])
assert not [k for k in sd if k.startswith("head.")], sorted(sd)
net = VisionTransformer({"embed_dim": 384, "patch_size": 16, "image_size": 32, "in_channels": 3, "depth": 12,
                         "heads": 12, "stop_grad_conv1": True})
net.load_state_dict(sd, strict=True)  # the reference has no head: every key and shape must match
print(f"{len(sd)} timm keys load into a ViT-S/16 of timm's layout")
PY
  ;;
hdf5_pack_np2)
  # The same generated ImageFolder packed by moco_pack into 3 shards per split, then trained from on
  # 2 ranks (data.dataset=hdf5): the run trains and evaluates, and each broken file is logged with
  # its shard and original path. moco_pack's --help, a second pack over the first (exit 2) and a
  # missing source (exit 2) as a user meets them.
  pack=$build/moco_pack
  grep -q -- "--shards" <<<"$("$pack" --help)" || { echo "moco_pack --help does not list --shards" >&2; exit 1; }
  "$py" "$src/tools/make_image_folder.py" "$work/data" --classes 4 --train 16 --val 4 --corrupt 2
  "$pack" "$work/data" "$work/packed" --shards 3 --threads 2 >"$work/pack.console" 2>&1 || { cat "$work/pack.console"; exit 1; }
  cat "$work/pack.console"
  for split in train val; do for s in 0 1 2; do
    [ -s "$work/packed/$split-0000$s-of-00003.h5" ] || { echo "no shard $split-0000$s-of-00003.h5" >&2; exit 1; }
  done; done
  ! grep -q tmp <<<"$(ls "$work/packed")" || { echo "temporary files left in $work/packed" >&2; exit 1; }
  rc=0; "$pack" "$work/data" "$work/packed" --shards 2 >"$work/again.console" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -q "shards of this split are there already" "$work/again.console" || { cat "$work/again.console"; echo "exit $rc" >&2; exit 1; }
  rc=0; "$pack" "$work/none" "$work/packed2" >"$work/none.console" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -q "$work/none/train: no such folder" "$work/none.console" && [ ! -e "$work/packed2" ] ||
    { cat "$work/none.console"; echo "exit $rc" >&2; exit 1; }
  run=(--config "$src/configs/imagefolder_quick.yaml" train.threads=1 train.epochs=1 ckpt.every_minutes=0 data.workers=1)
  mpirun -np 2 --oversubscribe "$dist" "${run[@]}" data.dataset=hdf5 data.root="$work/packed" train.output_dir="$work/np2" \
    >"$work/np2.console" 2>&1 || { cat "$work/np2.console"; exit 1; }
  # The same run from the folder: the same samples in the same order give the same losses.
  mpirun -np 2 --oversubscribe "$dist" "${run[@]}" data.dataset=imagefolder data.root="$work/data" train.output_dir="$work/folder_np2" \
    >"$work/folder_np2.console" 2>&1 || { cat "$work/folder_np2.console"; exit 1; }
  for k in 0 1; do
    grep -q "skipping unreadable image $work/packed/train-0000[0-2]-of-00003.h5 (class_0$k/corrupt_$k.jpg)" "$work/np2.console" "$work/np2"/rank*.log ||
      { cat "$work/np2.console"; echo "corrupt_$k.jpg not logged with its shard" >&2; exit 1; }
  done
  "$py" - "$work/np2/metrics.jsonl" "$work/folder_np2/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["event"] == "train"]
knn = {r["encoder"]: r["top1"] for r in rows if r["event"] == "knn"}
assert train and all(math.isfinite(r["loss"]) for r in train), "no finite training steps"
assert {"random_init", "trained"} <= set(knn), f"kNN rows: {knn}"
folder = [r["loss"] for r in map(json.loads, open(sys.argv[2])) if r["event"] == "train"]
assert [r["loss"] for r in train] == folder, f"losses from the shards {[r['loss'] for r in train]}, from the folder {folder}"
print(f"{len(train)} steps, loss {train[0]['loss']:.3f} -> {train[-1]['loss']:.3f} (the folder's, step for step), kNN {knn}")
PY
  ;;
online_probe_np2)
  # Two ranks, 3 epochs of 4 steps, check step syncs on. The online probe reads the query features
  # and never writes them: every tensor but the probe's equals a run without it, bit for bit. It is
  # scored after each epoch (steps 4, 8, 12), and its state is in the checkpoint: stopped at step 6
  # and resumed, the run ends with the same probe, scored the same.
  probe=("${base[@]}" data.synthetic_train_size=128 train.epochs=3 train.log_every=4 knn.raw_baseline=false
         debug.check_step_syncs=true)
  for run in off:false on:true resumed:true; do
    name=${run%%:*} flag=${run#*:}
    stops=("") && [ "$name" = resumed ] && stops=(train.stop_at_step=6 "")
    for stop in "${stops[@]}"; do
      mpirun -np 2 --oversubscribe "$dist" "${probe[@]}" eval.online_probe=$flag ${stop:+"$stop"} \
        train.output_dir="$work/$name" >"$work/$name.console" 2>&1 || { cat "$work/$name.console"; exit 1; }
    done
  done
  # Switched on when resuming a run without it: refused before any work, naming the key.
  rc=0 && "$dist" "${probe[@]}" eval.online_probe=true train.output_dir="$work/off" >"$work/switched.console" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] && grep -q "eval.online_probe: false in the checkpoint, true now" "$work/switched.console" ||
    { cat "$work/switched.console"; echo "eval.online_probe switched on at resume: exit $rc, not refused naming it" >&2; exit 1; }
  "$build/moco_ckpt" diff "$work/off" "$work/on" --ignore '^probe/' --ignore '^progress/train_seconds$' >"$work/diff_off_on" ||
    { cat "$work/diff_off_on"; echo "the probe changed the method's state" >&2; exit 1; }
  "$build/moco_ckpt" diff "$work/on" "$work/resumed" --ignore '^progress/train_seconds$' >"$work/diff_resumed" ||
    { cat "$work/diff_resumed"; echo "the resumed run's state differs" >&2; exit 1; }
  "$py" - "$work/off/metrics.jsonl" "$work/on/metrics.jsonl" "$work/resumed/metrics.jsonl" <<'PY'
import json, math, sys
off, on, resumed = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
loss = lambda rows: [r["loss"] for r in rows if r["event"] == "train"]
probe = lambda rows: [(r["step"], r["epoch"], r["top1"]) for r in rows if r["event"] == "probe"]
assert loss(off) == loss(on), f"losses without the probe {loss(off)}, with it {loss(on)}"
assert not probe(off), "a probe row without eval.online_probe"
assert [(s, e) for s, e, _ in probe(on)] == [(4, 1), (8, 2), (12, 3)], f"probe rows {probe(on)}"
assert all(0 <= t <= 100 for _, _, t in probe(on)), probe(on)
assert probe(resumed)[-2:] == probe(on)[-2:], f"resumed {probe(resumed)}, uninterrupted {probe(on)}"
print("probe", probe(on), "; the method's state bit for bit without it")
PY
  ;;
*) echo "unknown case $case_name" >&2; exit 1 ;;
esac
echo "PASS ($case_name)"
