#!/usr/bin/env bash
# Bad input as a user meets it: a bad command line or config exits 2 naming the file and the key,
# before any work (no output folder appears); data that is bad on disk, or an output folder that
# cannot be made, exits 1 naming the file. One case per ctest entry:
#   bad_input_test.sh CASE BUILD_DIR WORK_DIR
# shellcheck source=../lib/cli_case.sh
source "$(dirname "$0")/../lib/cli_case.sh"  # case_name build work src dist py tiny tiny_v3 out fail expect no_work_done

# IDX files (gzip) under $1: N train and test images of HxW (test size: TH x TW), labels from LABEL.
write_idx() {
  "$py" - "$@" <<'PY'
import gzip, struct, sys
root, n, h, w, th, tw, bad_label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
def images(name, hh, ww):
    with gzip.open(f"{root}/{name}", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, hh, ww) + bytes((i * i * 7 // 3) % 256 for i in range(n * hh * ww)))
def labels(name, bad):
    ls = [i % 10 for i in range(n)]
    if bad >= 0: ls[n // 2] = bad
    with gzip.open(f"{root}/{name}", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(ls))
images("train-images-idx3-ubyte.gz", h, w); labels("train-labels-idx1-ubyte.gz", bad_label)
images("t10k-images-idx3-ubyte.gz", th, tw); labels("t10k-labels-idx1-ubyte.gz", -1)
PY
}
idx_run=(--config "$tiny" data.dataset=mnist data.image_size=16 data.mean=0.5 data.std=0.5 train.threads=1
         optim.batch_size=16 moco.queue_size=64 knn.k=5 train.output_dir="$out")

case $case_name in
config_is_a_folder)
  expect 2 "$work: is a folder, not a config file" -- "$dist" --config "$work" train.output_dir="$out"
  no_work_done ;;
empty_config)
  : >"$work/empty.yaml"
  printf '# only a comment\n' >"$work/comment.yaml"
  for f in "$work/empty.yaml" "$work/comment.yaml"; do
    expect 2 "$f: the config file is empty" -- "$dist" --config "$f" train.output_dir="$out"
    no_work_done
  done ;;
mean_std_channels)
  # synthetic: data.synthetic_channels decides; the IDX sets are greyscale
  expect 2 "$tiny (with overrides): key 'data.mean' has 2 values but data.dataset synthetic has 3 channel(s)" -- \
    "$dist" --config "$tiny" data.synthetic_channels=3 data.mean=[0.1,0.2] data.std=[0.3,0.4] train.output_dir="$out"
  no_work_done
  printf 'data:\n  dataset: fashion_mnist\n  mean: [0.1, 0.2, 0.3]\n  std: [0.3, 0.3, 0.3]\n' >"$work/rgb.yaml"
  expect 2 "$work/rgb.yaml (with overrides): key 'data.mean' has 3 values but data.dataset fashion_mnist has 1 channel(s): give 1 value" -- \
    "$dist" --config "$work/rgb.yaml" train.output_dir="$out"
  no_work_done ;;
batch_not_divisible_np2)
  expect 2 "key 'optim.batch_size' (33) must be divisible by the number of ranks (2)" "$tiny" -- \
    mpirun -np 2 --oversubscribe "$dist" --config "$tiny" optim.batch_size=33 moco.bn_splits=1 train.threads=1 train.output_dir="$out"
  no_work_done ;;
empty_value)
  expect 2 "command-line override 'model.arch=': key 'model.arch' has no value (expects string)" -- \
    "$dist" --config "$tiny" model.arch= train.output_dir="$out"
  printf 'model:\n  arch:\n' >"$work/noarch.yaml"
  expect 2 "$work/noarch.yaml: key 'model.arch' has no value" -- "$dist" --config "$work/noarch.yaml" train.output_dir="$out"
  no_work_done ;;
invariants_with_step_syncs)
  expect 2 "$tiny (with overrides): key 'debug.check_invariants' cannot be on with debug.check_step_syncs" -- \
    "$dist" --config "$tiny" debug.check_invariants=true debug.check_step_syncs=true train.output_dir="$out"
  no_work_done ;;
v3_augmentation_keys)
  # v3's per-view keys: out of range, or given to a recipe that would ignore them, exit 2 naming the key.
  expect 2 "$tiny (with overrides): key 'data.key_solarize_prob' must lie in [0, 1]" -- \
    "$dist" --config "$tiny" data.augmentation=v3 data.key_solarize_prob=1.5 train.output_dir="$out"
  no_work_done
  expect 2 "$tiny (with overrides): key 'data.key_blur_prob' applies to data.augmentation v3 only, not v2" -- \
    "$dist" --config "$tiny" data.augmentation=v2 data.key_blur_prob=0.3 train.output_dir="$out"
  no_work_done
  expect 2 "$tiny (with overrides): key 'data.solarize_prob' applies to data.augmentation v3 only, not simple" -- \
    "$dist" --config "$tiny" data.solarize_prob=0.2 train.output_dir="$out"
  no_work_done
  expect 2 "$tiny (with overrides): key 'data.augmentation' must be simple, v1, v2 or v3, not 'v4'" -- \
    "$dist" --config "$tiny" data.augmentation=v4 train.output_dir="$out"
  no_work_done ;;
unknown_method)
  # model.method's list is the programs' (src/app/methods.cpp); ConfigTest pins its wording.
  expect 2 "$tiny (with overrides): key 'model.method' must be " ", not 'v4'" -- \
    "$dist" --config "$tiny" model.method=v4 train.output_dir="$out"
  no_work_done ;;
duplicate_key)
  printf 'optim:\n  base_lr: 0.1\n  batch_size: 64\n  base_lr: 0.2\n' >"$work/dup.yaml"
  expect 2 "$work/dup.yaml: key 'optim.base_lr' is given twice (lines 2 and 4)" -- "$dist" --config "$work/dup.yaml" train.output_dir="$out"
  printf 'model: {arch: resnet18}\noptim: {base_lr: 0.1}\nmodel: {mlp: true}\n' >"$work/dup_section.yaml"
  expect 2 "$work/dup_section.yaml: key 'model' is given twice (lines 1 and 3)" -- "$dist" --config "$work/dup_section.yaml" train.output_dir="$out"
  no_work_done ;;
idx_label_out_of_range)
  mkdir "$work/idx" && write_idx "$work/idx" 64 16 16 16 16 255
  expect 1 "$work/idx/train-labels-idx1-ubyte.gz: label 255 at index 32 is outside [0, 10)" -- \
    "$dist" "${idx_run[@]}" data.root="$work/idx" ;;
idx_test_size_differs)
  mkdir "$work/idx" && write_idx "$work/idx" 64 16 16 20 20 -1
  expect 1 "$work/idx/t10k-images-idx3-ubyte.gz: test images are 20x20 but $work/idx/train-images-idx3-ubyte.gz holds 16x16 train images" -- \
    "$dist" "${idx_run[@]}" data.root="$work/idx" ;;
idx_corrupt_gzip)
  # A byte of the deflate data damaged so that the decoder runs out of input before the data's end:
  # zlib calls that "unexpected end of file", as for a cut file; the message must say corrupt.
  mkdir "$work/idx" && write_idx "$work/idx" 64 16 16 16 16 -1
  "$py" - "$work/idx/train-images-idx3-ubyte.gz" <<'PY'
import sys, zlib
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
header = zlib.decompress(bytes(data), wbits=31)[:16]
def outcome(blob):
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(bytes(blob))
    except zlib.error:
        return "error"
    # the IDX header intact (before it, the data's size is unknown), the stream short of the data's end
    return "short" if not d.eof and 16 < len(out) < 16 + 64 * 256 and out[:16] == header else "other"
for pos in range(10, len(data) - 8):
    for mask in (0x55, 0x01, 0x80, 0xff):
        blob = bytearray(data); blob[pos] ^= mask
        if outcome(blob) == "short":
            open(path, "wb").write(blob); sys.exit(0)
sys.exit("no single-byte damage found that ends the stream early")
PY
  expect 1 "$work/idx/train-images-idx3-ubyte.gz: corrupt compressed data" -- "$dist" "${idx_run[@]}" data.root="$work/idx"
  ! grep -q truncated "$work/last.out" || fail "a damaged whole file reported as truncated"
  # ... and a file that is really cut short still says truncated
  write_idx "$work/idx" 64 16 16 16 16 -1
  "$py" -c "import sys; p=sys.argv[1]; b=open(p,'rb').read(); open(p,'wb').write(b[:len(b)//2])" "$work/idx/train-images-idx3-ubyte.gz"
  expect 1 "$work/idx/train-images-idx3-ubyte.gz: truncated" -- "$dist" "${idx_run[@]}" data.root="$work/idx" ;;
imagefolder_bad_folders)
  # A missing root, a split without class folders, an empty class, val classes that differ: exit 2
  # naming the config file, the keys and the folder, before any work.
  if_run=(--config "$src/configs/imagefolder_quick.yaml" train.threads=1 train.output_dir="$out")
  expect 2 "$src/configs/imagefolder_quick.yaml (with overrides): keys 'data.root' and 'data.train_dir': $work/none/train: no such folder" -- \
    "$dist" "${if_run[@]}" data.root="$work/none"
  no_work_done
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 2 --val 1
  mkdir -p "$work/if/train/class_02_empty" && touch "$work/if/train/class_02_empty/notes.txt"
  expect 2 "keys 'data.root' and 'data.train_dir': $work/if/train/class_02_empty: class folder without images" -- \
    "$dist" "${if_run[@]}" data.root="$work/if"
  no_work_done
  rmdir "$work/if/train/class_02_empty" 2>/dev/null || rm -r "$work/if/train/class_02_empty"
  mkdir -p "$work/if/empty_split"
  expect 2 "keys 'data.root' and 'data.val_dir': $work/if/empty_split: holds no class folder" -- \
    "$dist" "${if_run[@]}" data.root="$work/if" data.val_dir=empty_split
  no_work_done
  mkdir -p "$work/if/val/class_09" && cp "$work/if/val/class_00/"* "$work/if/val/class_09/"
  expect 2 "key 'data.val_dir': $work/if/val holds 3 class folders, not the 2 of $work/if/train" \
    "only in val: class_09; only in train: none" -- \
    "$dist" "${if_run[@]}" data.root="$work/if"
  no_work_done
  # RGB images: 2 values of mean/std fit neither 1 nor 3 channels (decided before any file is read)
  expect 2 "key 'data.mean' has 2 values but data.dataset imagefolder has 3 channel(s): give 1 value or 3" -- \
    "$dist" "${if_run[@]}" data.root="$work/none" data.mean=[0.1,0.2] data.std=[0.3,0.4]
  no_work_done ;;
hdf5_bad_shards)
  # Packed shards that are missing or do not belong together: exit 2 naming the keys and the shard,
  # before any work.
  h5_run=(--config "$src/configs/imagefolder_quick.yaml" data.dataset=hdf5 train.threads=1 train.output_dir="$out")
  expect 2 "keys 'data.root' and 'data.train_dir': $work/none: no such folder" -- "$dist" "${h5_run[@]}" data.root="$work/none"
  no_work_done
  mkdir -p "$work/empty"
  expect 2 "keys 'data.root' and 'data.train_dir': $work/empty: holds no shard train-00000-of-00001.h5" -- "$dist" "${h5_run[@]}" data.root="$work/empty"
  no_work_done
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 3 --val 2
  "$build/moco_pack" "$work/if" "$work/p3" --shards 3 >/dev/null
  "$build/moco_pack" "$work/if" "$work/p1" --shards 1 >/dev/null
  cp "$work/p1/val-00000-of-00001.h5" "$work/p3/"
  expect 2 "keys 'data.root' and 'data.val_dir': $work/p3/val-0000" "(shards of two packs; remove one)" -- "$dist" "${h5_run[@]}" data.root="$work/p3"
  no_work_done
  rm "$work/p3/val-00000-of-00001.h5" "$work/p3/train-00001-of-00003.h5"
  expect 2 "keys 'data.root' and 'data.train_dir': $work/p3/train-00001-of-00003.h5: missing" -- "$dist" "${h5_run[@]}" data.root="$work/p3"
  no_work_done ;;
output_dir_unwritable)
  expect 1 "train.output_dir '/proc/moco_dist_test/run': cannot create the folder" -- \
    "$dist" --config "$tiny" train.output_dir=/proc/moco_dist_test/run
  : >"$work/a_file"
  expect 1 "train.output_dir '$work/a_file/run': cannot create the folder (Not a directory)" -- \
    "$dist" --config "$tiny" train.output_dir="$work/a_file/run"
  expect 1 "train.output_dir '$work/a_file': exists and is not a folder" -- \
    "$dist" --config "$tiny" train.output_dir="$work/a_file" ;;
export_out_empty)
  "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" train.stop_at_step=1 knn.k=5 >/dev/null 2>&1 ||
    fail "pre-training"
  cd "$work"  # where an OUT of "" would put its temporary file
  expect 2 "export: OUT is empty: name a file to write" -- "$build/moco_ckpt" export "$work/run" ""
  ! ls -A "$work" | grep -q 'tmp-' || fail "a temporary file was written: $(ls -A "$work")" ;;
pack_split_twice)
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 2 --val 1
  expect 2 "--split 'train' is given twice" -- "$build/moco_pack" "$work/if" "$out" --split train --split train
  no_work_done ;;
pack_threads_0)
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 2 --val 1
  for n in 0 -3; do
    expect 2 "--threads: the shards written at once: at least 1, not $n" -- "$build/moco_pack" "$work/if" "$out" --threads "$n"
    no_work_done
  done ;;
moco_sh_ranks)
  # Not a count of ranks: refused before mpirun starts (0 divided the cores by zero and ran mpirun -np 0).
  for n in 0 abc '' -2; do
    expect 2 "moco.sh: -n '$n': expects the number of ranks, a whole number above 0" -- \
      env MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" -n "$n" "$tiny" train.output_dir="$out"
    ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
    no_work_done
  done
  # Counts past bash's 64-bit arithmetic wrapped into a count mpirun ran (99999999999999999999 made
  # -np 7766279631452241919, 18446744073709551617 made -np 1): refused by their digits, naming the limit.
  # A stand-in mpirun on PATH: a script that let such a count through starts no real processes.
  mkdir -p "$work/fake" && printf '#!/bin/sh\necho "fake mpirun $*"\n' >"$work/fake/mpirun" && chmod +x "$work/fake/mpirun"
  for n in 99999999999999999999 18446744073709551617 16777217 000000000000000000016777217; do
    expect 2 "moco.sh: -n '$n': more ranks than any machine runs (at most 16777216)" -- \
      env PATH="$work/fake:$PATH" MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" -n "$n" "$tiny" train.output_dir="$out"
    ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
    no_work_done
  done
  # Leading zeros are still the count they spell.
  expect 0 "-np 1 " -- env MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" -n 0001 "$tiny" train.threads=1 \
    train.stop_at_step=1 knn.k=5 train.output_dir="$out" ;;
knn_k_above_bank)
  # A k above the memory bank cannot be honoured: said once, and the k used is the one logged.
  expect 0 "knn.k 100 is more than the 64 images of the kNN memory bank (knn.memory_size 64): k=64 used" -- \
    "$dist" --config "$tiny" train.threads=1 knn.memory_size=64 knn.k=100 train.output_dir="$out"
  [ "$(grep -c 'is more than the 64 images' "$work/last.out")" -eq 1 ] || fail "the warning is not said once"
  grep -q "64 memory, .* k=64," "$work/last.out" || fail "the kNN line does not name the k used"
  # On 2 ranks the bank is sharded (64 images a rank): k is held against the whole bank, not a shard.
  expect 0 "" -- mpirun -np 2 --oversubscribe "$dist" --config "$tiny" train.threads=1 knn.memory_size=128 knn.k=100 \
    train.output_dir="$out.np2"
  ! grep -q "is more than" "$work/last.out" || fail "k held against one rank's share of the bank"
  grep -q "128 memory, .* k=100," "$work/last.out" || fail "the kNN line does not name k=100 over the 128-image bank" ;;
override_twice)
  # As in a file: which of two values was meant is not guessed (the last one used to win silently).
  expect 2 "command-line override 'optim.base_lr=0.2': key 'optim.base_lr' is given twice on the command line (also 'optim.base_lr=0.1')" -- \
    "$dist" --config "$tiny" optim.base_lr=0.1 train.output_dir="$out" optim.base_lr=0.2
  no_work_done
  expect 2 "key 'lincls.epochs' is given twice on the command line" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" lincls.epochs=1 lincls.epochs=2 train.output_dir="$out"
  no_work_done
  # The launcher's own train.resume=auto and train.threads give way to the user's.
  expect 0 "train.resume=never" -- env MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" -n 1 "$tiny" train.resume=never \
    train.threads=1 train.stop_at_step=1 knn.k=5 train.output_dir="$out"
  grep -q "train.resume=auto" "$work/last.out" && fail "moco.sh added train.resume=auto beside the user's" || true ;;
negative_milestones)
  for key in optim.milestones lincls.milestones; do
    expect 2 "key '$key' holds -5: milestones are epochs, at least 0" -- \
      "$dist" --config "$tiny" optim.schedule=step "$key=[-5, 3]" train.output_dir="$out"
    no_work_done
  done ;;
pretrained_without_checkpoint)
  # A folder that holds no checkpoint is the command line's mistake, like a path that does not exist.
  mkdir "$work/empty"
  expect 2 "model.pretrained: $work/empty: no checkpoint here" -- \
    "$dist" --config "$tiny" --eval-only model.pretrained="$work/empty" train.output_dir="$out"
  expect 2 "model.pretrained: $work/empty: no checkpoint here" -- "$dist" --config "$tiny" --eval-only train.output_dir="$work/empty"
  [ -z "$(ls -A "$work/empty")" ] || fail "--eval-only wrote into $work/empty: $(ls -A "$work/empty")"
  expect 2 "model.pretrained: $work/empty: no checkpoint here" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$work/empty" train.output_dir="$out"
  no_work_done ;;
split_below_one_batch)
  # 20 images cannot make one batch of 32: refused before any step, by --dry-run as by the run.
  for dry in --dry-run ""; do
    expect 2 "key 'optim.batch_size' (32): the train split has 20 images, fewer than one global batch" -- \
      "$dist" --config "$tiny" $dry data.synthetic_train_size=20 train.threads=1 train.output_dir="$out"
    no_work_done
  done ;;
batch_buffers_too_big)
  # What a rank's step holds is estimated before anything is built, --dry-run too, and the largest
  # part's key named (issue 57, X1/X2): the activations of 32 views of 65536 px through the encoder
  # (more than their pixels); a ResNet-50 of width 64 (9.6e10 parameters, held 4 times: 1.5e12 bytes,
  # more than any machine this runs on); the activations of 65536 views at 224 px. The linear
  # protocol's frozen encoder keeps no activations: its views are the largest part. data.image_size
  # has a bound, as every size key.
  for dry in "" --dry-run; do
    expect 2 "key 'data.image_size' must lie in [1, 65536]" -- \
      "$dist" --config "$tiny" $dry data.image_size=100000 train.output_dir="$out"
    no_work_done
    expect 2 "key 'optim.batch_size' (32) on 1 rank(s) sends 32 views per rank at once through resnet_tiny at 65536 px, whose forward keeps at least" -- \
      "$dist" --config "$tiny" $dry data.image_size=65536 train.output_dir="$out"
    no_work_done
    expect 2 "key 'model.width' (64) makes resnet50 of 9.61e+10 parameters, held 4 times as float32, at least 1.54e+12 bytes; a rank's step holds at least 1.55e+12 bytes" -- \
      "$dist" --config "$tiny" $dry model.arch=resnet50 model.width=64 train.output_dir="$out"
    no_work_done
    expect 2 "key 'optim.batch_size' (65536) on 1 rank(s) sends 65536 views per rank at once through resnet50 at 224 px" -- \
      "$dist" --config "$tiny" $dry model.arch=resnet50 model.small_stem=false data.image_size=224 optim.batch_size=65536 \
      moco.queue_size=65536 data.synthetic_train_size=65536 train.output_dir="$out"
    no_work_done
  done
  expect 2 "key 'data.image_size' (65536) with lincls.batch_size 32 on 1 rank(s) makes a batch of 32 views" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random data.image_size=65536 \
    train.output_dir="$out"
  no_work_done ;;
epochs_beyond_any_run)
  # 1e30 epochs of 16 steps: the step count overflowed int64 ("-9223372036854775808 steps", a
  # schedule over a negative length) and the run trained on. Refused, by --dry-run as by the run.
  for dry in --dry-run ""; do
    expect 2 "key 'train.epochs' (1e+30) at 16 steps per epoch makes 1.6e+31 steps: more than any run takes" -- \
      "$dist" --config "$tiny" $dry train.epochs=1e30 train.threads=1 train.output_dir="$out"
    no_work_done
  done
  # The longest run still counted one by one is accepted
  expect 0 "schedule: 9007199254740992 steps" -- \
    "$dist" --config "$tiny" --dry-run train.epochs=562949953421312 train.threads=1 train.output_dir="$out" ;;
thread_count_beyond_any_machine)
  # train.threads=100000 ran: LibTorch's pool of 100000 spinning threads held the host for minutes
  # (and did not answer SIGTERM). Refused with the config, before any thread starts (--print-config
  # reads the config as the run does, and starts nothing even where the check is missing).
  for key in train.threads data.workers; do
    expect 2 "key '$key' must be 0 (from the cores) or a thread count up to 1024, not 100000" -- \
      "$dist" --config "$tiny" --print-config "$key=100000" train.output_dir="$out"
    expect 2 "key '$key' must be 0 (from the cores) or a thread count up to 1024, not 100000" -- \
      "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" --print-config "$key=100000" train.output_dir="$out"
  done
  no_work_done ;;
override_read_as_another_text)
  # YAML reads 'DIR #2' as DIR (a comment) and a line break as a space: the run trained in (and
  # resumed from) another run's folder. Refused naming what YAML made of it; quoted, the text is kept.
  "$dist" --config "$tiny" train.threads=1 train.stop_at_step=1 train.output_dir="$work/exp" >/dev/null 2>&1 || fail "pre-training"
  cp -r "$work/exp" "$work/exp.before"
  for value in "$work/exp #2" "$work/exp
2" "!mine $work/exp"; do
    expect 2 "key 'train.output_dir' would read as '$work/exp" "quote the value in YAML to keep it" -- \
      "$dist" --config "$tiny" train.threads=1 "train.output_dir=$value"
    diff -r "$work/exp" "$work/exp.before" >/dev/null || fail "the other run's folder was written: $value"
  done
  expect 2 "key 'model.pretrained' would read as '$work/exp'" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" "model.pretrained=$work/exp #2" train.output_dir="$out"
  no_work_done
  expect 0 "output_dir: \"$work/exp #2\"" -- "$dist" --config "$tiny" --print-config "train.output_dir='$work/exp #2'" ;;
moco_sh_options)
  # An option moco.sh does not know was taken for the CONFIG after mpirun started; a hostfile mpirun
  # cannot use failed inside mpirun without naming it. Refused before mpirun starts, exit 2.
  sh_run() { env MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" "$@"; }
  expect 2 "moco.sh: unknown option '--frob'" -- sh_run -n 1 --frob "$tiny" train.output_dir="$out"
  ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
  expect 2 "moco.sh: --hostfile '$work/no_hosts': no such readable file" -- sh_run -n 2 --hostfile "$work/no_hosts" "$tiny" train.output_dir="$out"
  ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
  printf '# no host yet\n\n' >"$work/hosts"
  expect 2 "moco.sh: --hostfile '$work/hosts': names no host" -- sh_run --hostfile "$work/hosts" "$tiny" train.output_dir="$out"
  printf 'localhost\n' >"$work/hosts"
  expect 2 "moco.sh: --hostfile '$work/hosts': no host gives slots=N: give -n RANKS" -- sh_run --hostfile "$work/hosts" "$tiny" train.output_dir="$out"
  ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
  no_work_done
  # moco_dist's own --config is what it means
  expect 0 "stopped after step 1" -- sh_run -n 1 --config "$tiny" train.threads=1 train.stop_at_step=1 knn.k=5 train.output_dir="$out" ;;
moco_sh_restart_options)
  # moco.sh's elastic options: a count that is not one, a minimum above the ranks, and a hostfile line
  # without slots= (the world after a host is lost could not be sized) refused before mpirun starts.
  sh_run() { env MOCO_DIST="$dist" "$src/launch/mpirun/moco.sh" "$@"; }
  for n in abc -1 '' 1234567; do
    expect 2 "moco.sh: --max-restarts '$n': expects a whole number, at least 0 (at most 6 digits)" -- \
      sh_run -n 1 --max-restarts "$n" "$tiny" train.output_dir="$out"
  done
  expect 2 "moco.sh: --min-ranks '0': expects a whole number, at least 1" -- sh_run -n 1 --min-ranks 0 "$tiny" train.output_dir="$out"
  expect 2 "moco.sh: --min-ranks 3 is more than the 2 rank(s) the job starts with" -- \
    sh_run -n 2 --max-restarts 1 --min-ranks 3 "$tiny" train.output_dir="$out"
  printf 'node1 slots=2\nnode2\n' >"$work/hosts"
  expect 2 "moco.sh: --hostfile '$work/hosts': 'node2' gives no slots=N, which --max-restarts needs" -- \
    sh_run -n 2 --max-restarts 1 --hostfile "$work/hosts" "$tiny" train.output_dir="$out"
  expect 2 "key 'optim.batch_size' expects int, got 'abc'" "moco.sh: the config does not load" -- \
    sh_run -n 1 --max-restarts 1 "$tiny" optim.batch_size=abc train.output_dir="$out"
  ! grep -q "mpirun" "$work/last.out" || fail "mpirun was started"
  no_work_done
  expect 2 "moco.sbatch: --max-restarts 'x': expects a whole number" -- bash "$src/launch/slurm/moco.sbatch" --max-restarts x "$tiny"
  expect 0 "[--max-restarts N] [--min-ranks M] CONFIG" "--max-restarts N (default 0" -- sh_run --help ;;
mnist_on_the_fashion_root)
  # data.root's default is Fashion-MNIST's folder: data.dataset=mnist without a root of its own
  # trained on Fashion-MNIST (its IDX files read alike) and reported it as MNIST.
  for dry in --dry-run ""; do
    expect 2 "key 'data.root' is /usr/share/datasets/fashion-mnist, Fashion-MNIST's folder (the default), but data.dataset is mnist" -- \
      "$dist" --config "$tiny" $dry data.dataset=mnist data.mean=0.5 data.std=0.5 train.threads=1 train.output_dir="$out"
    no_work_done
  done
  expect 2 "key 'data.root' is /usr/share/datasets/fashion-mnist, Fashion-MNIST's folder (the default), but data.dataset is mnist" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random data.dataset=mnist data.mean=0.5 \
    data.std=0.5 train.output_dir="$out"
  no_work_done ;;
output_dir_inside_a_split)
  # A run's folder inside the ImageFolder split it reads: accepted, it became a class folder without
  # images, and every later run on the data (its own resume too) was refused. Refused first.
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 2 --val 1
  if_run=(--config "$src/configs/imagefolder_quick.yaml" train.threads=1 data.root="$work/if")
  for dir in train val; do
    expect 2 "keys 'train.output_dir' and 'data.${dir}_dir': $work/if/$dir/run lies inside the split folder $work/if/$dir the run reads" -- \
      "$dist" "${if_run[@]}" train.output_dir="$work/if/$dir/run"
    [ ! -e "$work/if/$dir/run" ] || fail "the run made its folder inside $work/if/$dir"
  done
  expect 2 "keys 'train.output_dir' and 'data.train_dir': $work/if/train/lin lies inside the split folder" -- \
    "$build/moco_lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random data.dataset=imagefolder \
    data.augmentation=v2 data.mean=0.5 data.std=0.5 data.root="$work/if" train.output_dir="$work/if/train/lin"
  [ ! -e "$work/if/train/lin" ] || fail "moco_lincls made its folder inside $work/if/train" ;;
ckpt_unknown_subcommand)
  # A misspelt subcommand was answered "A subcommand is required", naming neither the word nor the
  # subcommands.
  expect 2 "moco_ckpt: 'verfy' is not a subcommand: inspect, verify, export, diff (moco_ckpt --help)" -- \
    "$build/moco_ckpt" verfy "$work"
  expect 2 "A subcommand is required" -- "$build/moco_ckpt"
  expect 0 "Subcommands:" -- "$build/moco_ckpt" --help ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
