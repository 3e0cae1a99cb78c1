#!/usr/bin/env bash
# A run trains on the data the user thinks it does (issue 50 items 2, 3 and 12), end to end on a small
# generated ImageFolder (tools/make_image_folder.py: 2 classes of 24 train and 4 val images):
#   resume_changed_data  a checkpoint keeps its train split's fingerprint; a resume on other data (18 of
#                        48 images deleted; one file renamed, the count kept) is refused, exit 2,
#                        naming the counts and the first differing file, the run's folder untouched;
#                        train.resume_on_changed_data=true logs the change and goes on; a checkpoint
#                        written before fingerprints resumes, saying so once
#   ranks_disagree       two ranks whose data.root holds different files (a private mount namespace per
#                        rank, each binding its own copy over one path): moco_dist, --eval-only and
#                        moco_lincls stop before step 1, exit 2, naming the ranks, hosts and first
#                        differing entry, nothing written; for the same count with other content and for
#                        another count. Root only (mount namespaces), else skipped (77)
#   dry_run_read_only    --dry-run and --eval-only on a read-only data folder write no file-list cache
#                        into train.output_dir (a read-only bind mount: root only, else chmod)
# One case per ctest entry:
#   data_identity_test.sh CASE BUILD_DIR WORK_DIR
set -euo pipefail
case_name=$1 build=$2 work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist lincls=$build/moco_lincls py=/usr/bin/python3
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LC_ALL=C  # C: sort as the scan sorts
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
source "$src/tests/lib/expect.sh"
# The files of a folder with their checksums: what "untouched" compares.
snapshot() { (cd "$1" && find . -type f | sort | xargs -r md5sum); }

"$py" "$src/tools/make_image_folder.py" "$work/data" --classes 2 --train 24 --val 4 --sides 24 40 >/dev/null
# Folders changed in the last 2 s get no file-list cache (data/file_list_cache.h): aged, a scan keeps one.
find "$work/data" -type d -exec touch -d '1 hour ago' {} +
quick=(--config "$src/configs/imagefolder_quick.yaml" data.image_size=16 data.workers=1 train.threads=1 optim.batch_size=16
  moco.queue_size=32 knn.k=5 ckpt.every_minutes=0 ckpt.async=false)

case $case_name in
resume_changed_data)
  base=("${quick[@]}" data.root="$work/data" train.epochs=2)
  run=("${base[@]}" train.output_dir="$work/run")
  expect 0 "stopped after step 2" -- "$dist" "${run[@]}" train.stop_at_step=2
  cp -a "$work/data" "$work/data.orig"
  snapshot "$work/run" >"$work/run.before"
  # 18 of the 48 images gone (the last 9 of each class): refused before anything is written.
  for c in class_00 class_01; do ls "$work/data/train/$c" | sort | tail -9 | sed "s|^|$work/data/train/$c/|" | xargs rm; done
  first=$(ls "$work/data.orig/train/class_00" | sort | sed -n 16p)
  expect 2 "checkpoints/step_00000002 was trained on other data than the train split holds now: $work/data/train: 48 images then, 30 now; first difference at entry #15: 'class_00/$first' (" \
    "train.resume_on_changed_data=true" -- "$dist" "${run[@]}"
  snapshot "$work/run" | diff "$work/run.before" - || fail "the refused resume changed the run's folder"
  expect 2 "48 images then, 30 now" -- "$dist" "${run[@]}" --dry-run
  # The same count, one file renamed: its entry is named on both sides.
  rm -rf "$work/data" && cp -a "$work/data.orig" "$work/data"
  victim=$(ls "$work/data/train/class_01" | sort | head -1)
  mv "$work/data/train/class_01/$victim" "$work/data/train/class_01/zz_$victim"
  expect 2 "$work/data/train: 48 images then and now; first difference at entry #24: 'class_01/$victim' (" \
    "then, 'class_01/$(ls "$work/data.orig/train/class_01" | sort | sed -n 2p)' (" -- "$dist" "${run[@]}"
  snapshot "$work/run" | diff "$work/run.before" - || fail "the refused resume changed the run's folder"
  # Told to go on: the change is logged, the run ends, its later checkpoints keep the data as it is now.
  expect 0 "was trained on other data (train.resume_on_changed_data=true: going on with it): $work/data/train: 48 images then and now" -- \
    "$dist" "${run[@]}" train.resume_on_changed_data=true train.stop_at_step=4
  expect 0 "resumed from $work/run/checkpoints/step_00000004" -- "$dist" "${run[@]}"
  ! grep -q "trained on other data" "$work/last.out" || fail "the checkpoint written after the change does not keep the new data"
  # A checkpoint written before checkpoints kept their data (no note in its manifest) resumes, saying so.
  rm -rf "$work/data" && cp -a "$work/data.orig" "$work/data"
  expect 0 "stopped after step 2" -- "$dist" "${base[@]}" train.output_dir="$work/old" train.stop_at_step=2
  "$py" - "$work/old/checkpoints/step_00000002/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["notes"]
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
  expect 0 "was written before checkpoints kept the fingerprint of their data: its data is not compared" -- \
    "$dist" "${base[@]}" train.output_dir="$work/old"
  [ "$(grep -c "written before checkpoints kept the fingerprint" "$work/last.out")" = 1 ] || fail "said more than once"
  # 16 images more, so 4 batches per epoch, not 3 (issue 57, W1: exit 1 after rewriting config.yaml):
  # the step keeps counting and its place in the epoch is counted again; --dry-run names the change.
  rm -rf "$work/data" && cp -a "$work/data.orig" "$work/data"
  expect 0 "stopped after step 4" -- "$dist" "${base[@]}" train.output_dir="$work/grown" train.stop_at_step=4
  "$py" "$src/tools/make_image_folder.py" "$work/more" --classes 2 --train 8 --val 1 --sides 24 40 >/dev/null
  for c in class_00 class_01; do
    for f in "$work/more/train/$c"/*; do cp "$f" "$work/data/train/$c/more_$(basename "$f")"; done
  done
  expect 0 "(train.resume_on_changed_data=true: going on with it): $work/data/train: 48 images then, 64 now" -- \
    "$dist" "${base[@]}" train.output_dir="$work/grown" train.resume_on_changed_data=true --dry-run
  expect 0 "step 4 is not epoch 1 batch 1 of 4 batches per epoch (the train split changed size; train.resume_on_changed_data=true): step 4 goes on as epoch 1 batch 0" -- \
    "$dist" "${base[@]}" train.output_dir="$work/grown" train.resume_on_changed_data=true
  "$py" -c "import json,sys; s=[json.loads(l)['step'] for l in open(sys.argv[1]) if '\"train\"' in l]; assert s[-4:]==[5,6,7,8], s" \
    "$work/grown/metrics.jsonl" || fail "the grown run did not train steps 5-8"
  # The same files at another data.root (a new disk; issue 57, W2): the fingerprint proves them the
  # same, so the move is logged and the run resumes; a checkpoint without a fingerprint still refuses it.
  rm -rf "$work/data" && cp -a "$work/data.orig" "$work/data"
  expect 0 "stopped after step 2" -- "$dist" "${base[@]}" train.output_dir="$work/moved" train.stop_at_step=2
  cp -a "$work/data" "$work/data.moved"
  expect 0 "resume: data.root changes from $work/data to $work/data.moved" -- \
    "$dist" "${quick[@]}" train.epochs=2 data.root="$work/data.moved" train.output_dir="$work/moved" train.stop_at_step=3
  grep -qF "resumed from $work/moved/checkpoints/step_00000002" "$work/last.out" || fail "W2: not resumed"
  expect 0 "stopped after step 2" -- "$dist" "${base[@]}" train.output_dir="$work/unproven" train.stop_at_step=2
  "$py" -c "import json,sys; m=json.load(open(sys.argv[1])); del m['notes']; json.dump(m, open(sys.argv[1], 'w'))" \
    "$work/unproven/checkpoints/step_00000002/manifest.json"
  expect 2 "cannot resume, the config differs in keys that change the computation:" -- \
    "$dist" "${quick[@]}" train.epochs=2 data.root="$work/data.moved" train.output_dir="$work/unproven"
  grep -qF "data.root: $work/data in the checkpoint, $work/data.moved now" "$work/last.out" || fail "W2: no fingerprint, no move"
  ;;
ranks_disagree)
  [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null || { echo "SKIP: needs root for mount namespaces"; exit 77; }
  mkdir -p "$work/mnt"
  # ranks COPY0 COPY1 COMMAND...: two ranks, rank r in a mount namespace of its own with COPYr bound
  # over $work/mnt; the namespaces end with the ranks, whatever their end.
  ranks() {
    local a=$1 b=$2
    shift 2
    mpirun -np 2 --oversubscribe env COPY0="$a" COPY1="$b" unshare -m --propagation private \
      sh -c 'eval "copy=\$COPY$OMPI_COMM_WORLD_RANK" && mount --bind "$copy" "$0" && exec "$@"' "$work/mnt" "$@"
  }
  cp -a "$work/data" "$work/same"
  # Rank 1's copy holds the same 48 files, but two of them swapped between the classes (a label each).
  cp -a "$work/data" "$work/swapped"
  a=$(ls "$work/data/train/class_00" | sort | sed -n 3p) b=$(ls "$work/data/train/class_01" | sort | sed -n 3p)
  mv "$work/swapped/train/class_00/$a" "$work/swapped/train/class_01/x_$a"
  mv "$work/swapped/train/class_01/$b" "$work/swapped/train/class_00/x_$b"
  # Rank 1's copy lacks one file (a stale copy).
  cp -a "$work/data" "$work/short"
  gone=$(ls "$work/data/train/class_01" | sort | tail -1)
  rm "$work/short/train/class_01/$gone"
  host=$(hostname)
  expect 0 "data: the 2 ranks hold the same train split (48 images) and val split (8 images)" -- \
    ranks "$work/data" "$work/same" "$dist" "${quick[@]}" data.root="$work/mnt" train.stop_at_step=1 train.output_dir="$work/ok"
  first=$(cd "$work/data/train" && ls class_00 | sort | sed -n 3p)
  for program in dist eval_only lincls; do
    case $program in
    dist) cmd=("$dist" "${quick[@]}" train.output_dir="$work/$program") ;;
    eval_only) cmd=("$dist" "${quick[@]}" --eval-only model.pretrained=random train.output_dir="$work/$program") ;;
    lincls) cmd=("$lincls" "${quick[@]}" lincls.epochs=1 lincls.batch_size=16 model.pretrained="$work/ok" train.output_dir="$work/$program") ;;
    esac
    expect 2 "the ranks do not hold the same data: the train split ($work/mnt/train): rank 0 (host $host) holds 48 images; rank 1 (host $host) holds 48 images, first difference at entry #2: rank 0 has 'class_00/$first' (" \
      "rank 1 has 'class_00/" -- ranks "$work/data" "$work/swapped" "${cmd[@]}" data.root="$work/mnt"
    [ ! -e "$work/$program" ] || fail "$program: the refusal wrote $work/$program"
    expect 2 "rank 1 (host $host) holds 47 images, first difference at entry #47: rank 0 has 'class_01/$gone' (" \
      "rank 1 has none (its list ends before)" -- ranks "$work/data" "$work/short" "${cmd[@]}" data.root="$work/mnt"
    [ ! -e "$work/$program" ] || fail "$program: the refusal wrote $work/$program"
  done
  ! grep -q "$work/mnt" /proc/mounts || fail "a rank's mount is left in this namespace"
  ;;
dry_run_read_only)
  run=("${quick[@]}" data.root="$work/ro" train.output_dir="$work/out")
  mkdir -p "$work/out" "$work/ro"
  if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    # Root writes through chmod: a read-only bind mount, in a namespace of its own.
    in_ro() { unshare -m --propagation private sh -c 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"' sh "$work/data" "$work/ro" "$@"; }
  else
    cp -a "$work/data/." "$work/ro/" && chmod -R a-w "$work/ro"
    in_ro() { "$@"; }
  fi
  expect 0 "dry run: nothing is trained or written" -- in_ro "$dist" "${run[@]}" --dry-run
  [ -z "$(ls -A "$work/out")" ] || { ls -la "$work/out"; fail "a dry run wrote into train.output_dir"; }
  expect 0 "kNN top-1" -- in_ro "$dist" "${run[@]}" --eval-only model.pretrained=random
  [ -z "$(ls -A "$work/out")" ] || { ls -la "$work/out"; fail "--eval-only wrote into train.output_dir"; }
  # The run itself keeps the list there, for the next start.
  expect 0 "file list kept in $work/out/.moco_filelist-train.txt" -- in_ro "$dist" "${run[@]}" train.stop_at_step=1
  ;;
*)
  fail "unknown case $case_name" ;;
esac
echo "PASS $case_name"
