#!/usr/bin/env bash
# The tools never damage what they read, a refusal (exit 2) writes nothing, and every failure names
# its cause (issue 24): moco_ckpt export/diff, moco_pack, moco_lincls and moco_dist's refusals. One
# case per ctest entry:
#   never_damage_test.sh CASE BUILD_DIR WORK_DIR [RANKS]
set -euo pipefail
case_name=$1 build=$2 work=$3 np=${4:-1}
src=$(cd "$(dirname "$0")/../.." && pwd)
dist=$build/moco_dist ckpt=$build/moco_ckpt pack=$build/moco_pack lincls=$build/moco_lincls py=/usr/bin/python3
tiny=$src/tests/fixtures/tiny_synthetic.yaml
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"

fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }
ranks() { if [ "$np" -gt 1 ]; then mpirun -np "$np" --oversubscribe "$@"; else "$@"; fi; }

# shellcheck source=../lib/expect.sh
source "$src/tests/lib/expect.sh"  # expect CODE TEXT... -- command...
# A listing of every file under $1 with its checksum: compared before and after a refusal.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum; find . | sort); }
absent() { [ ! -e "$1" ] || fail "$1 was created"; }

pretrain() {  # a 1-step run with a checkpoint in $work/run
  ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" train.stop_at_step=1 knn.k=5 \
    >"$work/run.console" 2>&1 || { cat "$work/run.console"; fail "pre-training"; }
}
step=$work/run/checkpoints/step_00000001
# The last training step FOLDER's run logged (empty before the first).
step_logged() { grep -h '"event":"train"' "$1/metrics.jsonl" 2>/dev/null | grep -o '"step":[0-9]*' | tr -dc '0-9\n' | sort -n | tail -n 1; }
# ranks in the background as one process: $! is moco_dist itself (one rank) or mpirun (its ranks its children).
background_ranks() { if [ "$np" -gt 1 ]; then exec mpirun -np "$np" --oversubscribe "$@"; else exec "$@"; fi; }
# SIGNAL PID: the signal to each rank of the background run PID (mpirun's children, or PID itself).
stop_ranks() { if [ "$np" -gt 1 ]; then for rank in $(pgrep -P "$2"); do kill -"$1" "$rank"; done; else kill -"$1" "$2"; fi; }
wait_for_steps() {  # PID FOLDER: until the run (PID) logged a training step in FOLDER
  for _ in $(seq 600); do
    [ -n "$(step_logged "$2")" ] && return 0
    kill -0 "$1" 2>/dev/null || fail "the run in $2 ended early"
    sleep 0.2
  done
  fail "no step logged in $2 within 120 s"
}
# A process holding FOLDER's lock as a running tool does (flock, "host pid" in moco.lock); its pid in
# $holder.
hold_lock() {
  mkdir -p "$1"
  "$py" - "$1/moco.lock" <<'PY' &
import fcntl, os, socket, sys, time
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.truncate(0); f.write(f"{socket.gethostname()} {os.getpid()}\n"); f.flush()
time.sleep(120)
PY
  holder=$!
  trap 'kill "$holder" 2>/dev/null || true' EXIT  # a failed case does not wait for it
  for _ in $(seq 100); do [ -s "$1/moco.lock" ] && return 0; sleep 0.1; done
  fail "the lock holder did not start"
}
image_folder() {
  "$py" "$src/tools/make_image_folder.py" "$work/if" --classes 2 --train 4 --val 2 >/dev/null
}

case $case_name in
export_inside_source)
  pretrain
  snapshot "$work/run" >"$work/before"
  shard=$(ls "$step"/shard-*.h5 | head -1)
  expect 2 "lies inside the checkpoint" "$shard" "$step" -- "$ckpt" export "$work/run" "$shard"
  expect 2 "lies inside the checkpoint" -- "$ckpt" export "$work/run" "$step/new.h5"
  snapshot "$work/run" | diff "$work/before" - || fail "the checkpoint changed"
  ;;
export_into_run)
  # OUT inside the run of the checkpoint read (an older step's shard or manifest, `latest`, a new
  # file): refused with or without --force, whether CHECKPOINT names the run or the step.
  pretrain
  ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" train.stop_at_step=2 knn.k=5 \
    >"$work/run2.console" 2>&1 || { cat "$work/run2.console"; fail "the second step"; }
  snapshot "$work/run" >"$work/before"
  latest=$work/run/checkpoints/step_00000002
  for out in "$(ls "$step"/shard-*.h5 | head -1)" "$step/manifest.json" "$work/run/checkpoints/latest" "$work/run/backbone.h5"; do
    for from in "$work/run" "$latest"; do
      expect 2 "export: OUT $out lies inside $work/run, the run of the checkpoint it reads ($latest)" -- \
        "$ckpt" export "$from" "$out" --force
    done
  done
  expect 2 "lies inside $work/run, the run of the checkpoint it reads" -- "$ckpt" export "$work/run" "$work/run/backbone.h5"
  snapshot "$work/run" | diff "$work/before" - || fail "the run changed"
  "$ckpt" verify "$step" >/dev/null && "$ckpt" verify "$work/run" >/dev/null || fail "a checkpoint no longer verifies"
  ;;
export_force_special)
  # --force replaces only a regular file: a device (as root the rename replaced /dev/null with a
  # file) or a FIFO is refused, untouched. Never /dev/null itself: a tool that fails this case would
  # break the machine; a device node of our own where we may make one (root), else a FIFO only.
  pretrain
  mkfifo "$work/fifo"
  outs=("$work/fifo")
  if mknod "$work/null" c 1 3 2>/dev/null; then outs+=("$work/null"); fi
  for out in "${outs[@]}"; do
    expect 2 "export: OUT $out is not a regular file: --force replaces only regular files" -- \
      "$ckpt" export "$work/run" "$out" --force
  done
  [ -p "$work/fifo" ] || fail "the FIFO was replaced"
  [ ! -e "$work/null" ] || [ -c "$work/null" ] || fail "the device was replaced"
  ! ls "$work" | grep -q 'tmp-' || fail "a temporary file was left: $(ls "$work")"
  ;;
pack_split_names)
  # A split names a folder of SRC and the shards' prefix in OUT: "../if/train" would write
  # OUT/../if/train-00000-of-00001.h5 into SRC; an absolute name anywhere. Refused, nothing written.
  image_folder
  snapshot "$work/if" >"$work/before"
  for split in ../if/train "$work/if/train" . .. "a/b" ""; do
    expect 2 "--split '$split': not a plain name (letters, digits, '.', '_', '-'; not . or ..)" -- \
      "$pack" "$work/if" "$work/out" --split "$split"
  done
  snapshot "$work/if" | diff "$work/before" - || fail "SRC changed"
  absent "$work/out"
  cp -r "$work/if/train" "$work/if/tr.v2_b-1"  # every character a plain name may hold
  expect 0 "tr.v2_b-1: 8 images" -- "$pack" "$work/if" "$work/out" --split tr.v2_b-1
  ;;
export_existing)
  pretrain
  echo old >"$work/out.h5"
  expect 2 "$work/out.h5 exists already (--force replaces it)" -- "$ckpt" export "$work/run" "$work/out.h5"
  [ "$(cat "$work/out.h5")" = old ] || fail "an existing OUT was replaced without --force"
  expect 0 "tensors of encoder_q" -- "$ckpt" export "$work/run" "$work/out.h5" --force
  "$py" -c "import h5py, sys; assert 'layer1.0.conv1.weight' in h5py.File(sys.argv[1])" "$work/out.h5" \
    || fail "--force did not replace OUT with an export"
  mkdir -p "$work/folder/inner"
  expect 2 "$work/folder is a folder" -- "$ckpt" export "$work/run" "$work/folder" --force
  [ -d "$work/folder/inner" ] || fail "the folder was touched"
  expect 2 "export: --module 'nosuch': $step holds no such module (it has: " -- \
    "$ckpt" export "$work/run" "$work/none.h5" --module nosuch
  absent "$work/none.h5"
  expect 2 "export: --format 'pt': not one of h5, torch, detectron2, moco" -- \
    "$ckpt" export "$work/run" "$work/none.h5" --format pt
  absent "$work/none.h5"
  expect 2 "detectron2 reads a .pkl file with pickle.load, not torch.load: name it .pth" -- \
    "$ckpt" export "$work/run" "$work/none.pkl" --format detectron2
  absent "$work/none.pkl"
  expect 0 "format torch" -- "$ckpt" export "$work/run" "$work/out.pth" --format torch
  "$py" -c "import torch, sys; d = torch.load(sys.argv[1]); assert 'layer1.0.conv1.weight' in d and not any(k.startswith('fc.') for k in d)" \
    "$work/out.pth" || fail "--format torch did not write a torch.load file of the backbone"
  expect 0 "format detectron2" -- "$ckpt" export "$work/run" "$work/d2.pth" --format detectron2
  "$py" -c "import torch, sys; d = torch.load(sys.argv[1]); assert d['__author__'] == 'MOCO' and 'res2.0.conv1.weight' in d['model'] and any(k.startswith('stem.fc.') for k in d['model'])" \
    "$work/d2.pth" || fail "--format detectron2 did not write detectron2's weights"
  # rng holds rank-local tensors only: found, then nothing to export (no file begun).
  expect 1 "no tensor of module 'rng' to export" -- "$ckpt" export "$work/run" "$work/none.h5" --module rng
  absent "$work/none.h5"
  ! ls "$work" | grep -q "tmp" || fail "a temporary file was left: $(ls "$work")"
  ;;
export_interrupted)
  pretrain
  # A killed export's temporary file (kill -9: nothing can remove it then) is removed by the next
  # export to the same OUT; a running one's (this shell's pid) is left alone.
  echo x >"$work/out.h5.tmp-999999"
  echo x >"$work/out.h5.tmp-$$"
  expect 0 "moco_ckpt: removed $work/out.h5.tmp-999999, left by an interrupted export" -- \
    "$ckpt" export "$work/run" "$work/out.h5"
  absent "$work/out.h5.tmp-999999"
  [ -e "$work/out.h5.tmp-$$" ] || fail "a running export's temporary file was removed"
  # SIGINT (Ctrl-C), SIGTERM or SIGHUP while the temporary file is written (held there by the test
  # hook): the file is removed and the export ends as the signal says. Job control on, so that the
  # background export does not start with SIGINT ignored, as a terminal's foreground job would not.
  for sig in INT TERM HUP; do
    rm -f "$work/int.console"  # the last round's pause line is not this one's
    set -m
    MOCO_CKPT_FAULT=pause_in_export "$ckpt" export "$work/run" "$work/int.h5" >"$work/int.console" 2>&1 &
    pid=$!
    set +m
    for _ in $(seq 150); do grep -qs "MOCO_CKPT_FAULT: pausing" "$work/int.console" && break; sleep 0.1; done
    grep -q "MOCO_CKPT_FAULT: pausing $work/int.h5.tmp-$pid" "$work/int.console" || fail "no pause in the export"
    [ -s "$work/int.h5.tmp-$pid" ] || fail "no temporary file while the export pauses"
    kill -"$sig" "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq $((128 + $(kill -l "$sig"))) ] || fail "exit $rc after SIG$sig, not killed by it"
    absent "$work/int.h5.tmp-$pid"
    absent "$work/int.h5"
  done
  ;;
export_races_retention)
  # The checkpoint deleted while the export reads it, as a running run's retention deletes its older
  # checkpoints (held by the test hook once the manifest is read, before any shard): the error says so.
  pretrain
  MOCO_CKPT_FAULT=pause_before_export_read "$ckpt" export "$step" "$work/out.h5" >"$work/race.console" 2>&1 &
  pid=$!
  for _ in $(seq 150); do grep -qs "MOCO_CKPT_FAULT: pausing" "$work/race.console" && break; sleep 0.1; done
  grep -q "MOCO_CKPT_FAULT: pausing $step" "$work/race.console" || fail "no pause before the export reads"
  rm -r "$step"
  rc=0
  wait "$pid" || rc=$?
  cat "$work/race.console"
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  grep -qF "$step was deleted while it was read (a running run's retention, ckpt.keep_last" "$work/race.console" ||
    fail "the deletion is not named as the cause"
  absent "$work/out.h5"
  ! ls "$work" | grep -q "out.h5.tmp" || fail "a temporary file was left"
  ;;
export_vit_detectron2)
  # detectron2's converter renames a ResNet's keys; a ViT's came out as "stem.cls_token",
  # "stem.blocks.0..." (64 keys no detectron2 model has). Refused naming the architecture, nothing
  # written; --format torch (timm's names) still exports it.
  "$dist" --config "$src/tests/fixtures/tiny_synthetic_v3.yaml" train.threads=1 train.output_dir="$work/vit" \
    train.stop_at_step=1 knn.k=5 model.arch=vit_tiny_cpu >"$work/vit.console" 2>&1 || { cat "$work/vit.console"; fail "pre-training"; }
  expect 2 "export: --format detectron2: $work/vit/checkpoints/step_00000001 is a ViT (model.arch=vit_tiny_cpu); detectron2's converter and backbones are for ResNets" -- \
    "$ckpt" export "$work/vit" "$work/vit_d2.pth" --format detectron2
  absent "$work/vit_d2.pth"
  ! ls "$work" | grep -q "tmp" || fail "a temporary file was left: $(ls "$work")"
  expect 0 "format torch" -- "$ckpt" export "$work/vit" "$work/vit.pth" --format torch
  ;;
diff_bad_flags)
  pretrain
  expect 2 "--ignore '([' is not a regular expression" -- "$ckpt" diff "$work/run" "$work/run" --ignore '(['
  expect 2 "--atol: must be >= 0" -- "$ckpt" diff "$work/run" "$work/run" --atol -1
  expect 0 "0 differ" -- "$ckpt" diff "$work/run" "$work/run" --ignore '^progress/'
  ;;
pack_signal_in_commit)
  # SIGTERM, SIGINT or SIGHUP while the shards are renamed (held there by the test hook): the pack
  # is whole once the renames are done, so it finishes, says so and exits 0.
  image_folder
  for sig in TERM INT HUP; do
    rm -rf "$work/out" "$work/pack.console"
    set -m
    MOCO_CKPT_FAULT=pause_in_pack_commit "$pack" "$work/if" "$work/out" --shards 2 >"$work/pack.console" 2>&1 &
    pid=$!
    set +m
    for _ in $(seq 150); do grep -qs "MOCO_CKPT_FAULT: pausing" "$work/pack.console" && break; sleep 0.1; done
    grep -q "MOCO_CKPT_FAULT: pausing $work/out" "$work/pack.console" || fail "no pause in the commit"
    kill -"$sig" "$pid"
    rc=0
    wait "$pid" || rc=$?
    cat "$work/pack.console"
    [ "$rc" -eq 0 ] || fail "exit $rc after SIG$sig during the commit, not 0"
    grep -q "moco_pack: SIG$sig came while the shards were renamed: the pack is whole, so it finishes" \
      "$work/pack.console" || fail "SIG$sig is not said"
    grep -q "^packed in" "$work/pack.console" || fail "no summary"
    [ -s "$work/out/train.complete" ] && [ -s "$work/out/val.complete" ] || fail "the pack is not whole"
  done
  ;;
pack_inside_src)
  image_folder
  snapshot "$work/if" >"$work/before"
  expect 2 "OUT $work/if/packed lies inside SRC $work/if" -- "$pack" "$work/if" "$work/if/packed"
  snapshot "$work/if" | diff "$work/before" - || fail "SRC changed"
  ;;
pack_all_or_none)
  # The second shard's final name is taken by a folder: its rename fails after the first one's
  # succeeded. No shard may stay, no temporary file either, and the message says why (not "Success").
  image_folder
  mkdir -p "$work/out/train-00001-of-00002.h5/blocker"
  expect 1 "cannot rename" "Is a directory" "no shard of this pack is left" -- \
    "$pack" "$work/if" "$work/out" --shards 2 --overwrite
  ! grep -q "Success" "$work/last.out" || fail "the rename's error is not its own"
  left=$(cd "$work/out" && ls | grep -v '^train-00001-of-00002.h5$' || true)
  [ -z "$left" ] || fail "a failed pack left: $left"
  ;;
pack_leftovers_removed)
  image_folder
  mkdir -p "$work/out"
  echo x >"$work/out/train-00000-of-00001.h5.tmp-999999"  # no such process
  echo x >"$work/out/val-00000-of-00001.h5.tmp-$$"       # a live one: this shell
  expect 0 "removed $work/out/train-00000-of-00001.h5.tmp-999999, left by an interrupted pack" -- \
    "$pack" "$work/if" "$work/out"
  absent "$work/out/train-00000-of-00001.h5.tmp-999999"
  [ -e "$work/out/val-00000-of-00001.h5.tmp-$$" ] || fail "a running pack's temporary file was removed"
  [ -e "$work/out/train-00000-of-00001.h5" ] || fail "no shard"
  ;;
pack_interrupted)
  # What a pack killed (kill -9) during its renames leaves: shards under their final names but no
  # <split>.complete, which is removed before the first rename and written after the last. moco_dist
  # refuses the split naming the folder; moco_pack refuses to pack over it without --overwrite, and
  # with it makes the folder whole again.
  image_folder
  "$pack" "$work/if" "$work/a" --shards 2 >/dev/null
  "$pack" "$work/if" "$work/b" --shards 2 >/dev/null
  [ -s "$work/b/train.complete" ] && [ -s "$work/b/val.complete" ] || fail "no marker after a pack"
  h5_run=("$dist" --config "$src/configs/imagefolder_quick.yaml" data.dataset=hdf5 train.threads=1 --dry-run
          optim.batch_size=4 train.output_dir="$work/out")
  expect 0 "" -- "${h5_run[@]}" data.root="$work/b"
  rm "$work/b/train.complete"  # killed between the renames
  expect 2 "$work/b: the pack of split 'train' is incomplete: no $work/b/train.complete" \
    "re-run moco_pack into $work/b (with --overwrite)" -- "${h5_run[@]}" data.root="$work/b"
  absent "$work/out"
  expect 2 "shards of an interrupted pack are there (no $work/b/train.complete): pack with --overwrite" -- \
    "$pack" "$work/if" "$work/b" --shards 2
  # A shard of another pack beside the marker (a set mixed by hand): refused too.
  "$pack" "$work/if" "$work/b" --shards 2 --overwrite >/dev/null
  cp "$work/a/val-00001-of-00002.h5" "$work/b/"
  expect 2 "$work/b/val-00001-of-00002.h5: a shard of another pack than $work/b/val.complete says" -- \
    "${h5_run[@]}" data.root="$work/b"
  # A failed --overwrite (shard 1's name taken by a folder) leaves the old pack's markers gone: the
  # split it half replaced is refused, never read as whole.
  "$pack" "$work/if" "$work/b" --shards 2 --overwrite >/dev/null
  rm "$work/b/train-00001-of-00002.h5" && mkdir -p "$work/b/train-00001-of-00002.h5/blocker"
  expect 1 "cannot rename" "no shard of this pack is left" -- "$pack" "$work/if" "$work/b" --shards 2 --overwrite
  absent "$work/b/train.complete"
  absent "$work/b/val.complete"
  rm -r "$work/b/train-00001-of-00002.h5"
  expect 0 "train: 8 images" -- "$pack" "$work/if" "$work/b" --shards 2 --overwrite
  expect 0 "" -- "${h5_run[@]}" data.root="$work/b"
  ;;
fresh_start_keeps_earlier_metrics)
  # A run that left no checkpoint (it failed before its first, or they were deleted), then a fresh
  # start in its folder: the earlier metrics.jsonl was truncated and config.yaml rewritten, the one
  # record of what that run did, and tb/ got a second run's events beside the first's (TensorBoard
  # overlaid them). Kept under the next free suffix, said once; moco_lincls alike.
  pretrain
  rm -r "$work/run/checkpoints"
  cp "$work/run/metrics.jsonl" "$work/metrics.before" && cp "$work/run/config.yaml" "$work/config.before"
  events=$(ls "$work/run/tb")
  files="metrics.jsonl, config.yaml and tb/"
  kept="this run starts afresh; the earlier $files are kept as metrics.jsonl.1, config.yaml.1 and tb.1/"
  expect 0 "train.output_dir '$work/run' holds an earlier run's $files and no checkpoint to resume: $kept" -- \
    "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" train.stop_at_step=1 knn.k=5 train.seed=3
  cmp "$work/run/metrics.jsonl.1" "$work/metrics.before" || fail "metrics.jsonl.1 is not the earlier run's"
  cmp "$work/run/config.yaml.1" "$work/config.before" || fail "config.yaml.1 is not the earlier run's"
  [ "$(ls "$work/run/tb.1")" = "$events" ] || fail "tb.1/ is not the earlier run's events: $(ls "$work/run/tb.1")"
  [ "$(ls "$work/run/tb" | wc -l)" -eq 1 ] && [ "$(ls "$work/run/tb")" != "$events" ] || fail "tb/ holds more than this run"
  grep -q "seed: 3" "$work/run/config.yaml" || fail "config.yaml is not this run's"
  [ "$(grep -c '"event":"train"' "$work/run/metrics.jsonl")" -eq 1 ] || fail "metrics.jsonl holds more than this run"
  # A resume appends and keeps nothing aside
  expect 0 "" -- "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" train.stop_at_step=2 knn.k=5 train.seed=3
  absent "$work/run/metrics.jsonl.2"
  grep -q '"event":"resume"' "$work/run/metrics.jsonl" || fail "the resume did not append"
  # moco_lincls, twice: the next free suffix
  lin=(--config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random lincls.epochs=1 train.output_dir="$work/lin")
  "$lincls" "${lin[@]}" >/dev/null 2>&1 || fail "moco_lincls"
  rm -r "$work/lin/checkpoints"
  for n in 1 2; do
    cp "$work/lin/metrics.jsonl" "$work/lin.before"
    expect 0 "the earlier $files are kept as metrics.jsonl.$n, config.yaml.$n and tb.$n/" -- "$lincls" "${lin[@]}"
    cmp "$work/lin/metrics.jsonl.$n" "$work/lin.before" || fail "lincls metrics.jsonl.$n is not the earlier run's"
    rm -r "$work/lin/checkpoints"
  done
  # A folder holding only an earlier config.yaml (a run refused after writing it, or stopped before its
  # first metrics row): it was overwritten without a copy. Kept, under the first suffix free for all
  # three (tb.1/ taken by hand here: .2 for each).
  mkdir -p "$work/only/tb.1"
  printf 'train: {seed: 7}\n' >"$work/only/config.yaml"
  expect 0 "holds an earlier run's config.yaml and no checkpoint to resume: this run starts afresh; the earlier config.yaml is kept as config.yaml.2" -- \
    "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/only" train.stop_at_step=1 knn.k=5
  [ "$(cat "$work/only/config.yaml.2")" = "train: {seed: 7}" ] || fail "config.yaml.2 is not the earlier config"
  absent "$work/only/config.yaml.1"
  absent "$work/only/metrics.jsonl.2"
  ;;
two_runs_one_folder)
  # A second run in the folder of one that trains: exit 2 on every rank before any work, naming the
  # first's host and pid (rank 0's: it holds the lock), writing nothing; the first finishes (exit 0).
  # The first is long enough never to end by itself while the second is refused (20 epochs did end
  # within the 3 s the case took in CI): SIGUSR1 stops it with a checkpoint.
  long=(--config "$tiny" train.threads=1 data.synthetic_train_size=256 train.epochs=5000 knn.k=5)
  background_ranks "$dist" "${long[@]}" train.output_dir="$work/run" >"$work/first.console" 2>&1 &
  first=$!
  wait_for_steps "$first" "$work/run"
  if [ "$np" -gt 1 ]; then rank0=$(pgrep -P "$first" | sort -n | head -1); else rank0=$first; fi
  expect 2 "train.output_dir '$work/run' is in use by another run: host $(hostname) pid $rank0 holds its lock $work/run/moco.lock" -- \
    ranks "$dist" "${long[@]}" train.output_dir="$work/run" train.log_every=7
  [ "$(cat "$work/run/moco.lock")" = "$(hostname) $rank0" ] || fail "the lock file holds '$(cat "$work/run/moco.lock")'"
  [ "$np" -eq 1 ] || [ "$(grep -c 'is in use by another run' "$work/last.out")" -eq 1 ] || fail "rank 1 did not exit 2 quietly"
  kill -0 "$first" 2>/dev/null || fail "the first run ended before the second was refused: this case needs it running"
  stop_ranks USR1 "$first"
  rc=0
  wait "$first" || rc=$?
  [ "$rc" -eq 0 ] || { tail -n 20 "$work/first.console"; fail "the first run ended with exit $rc"; }
  ! grep -q "log_every: 7" "$work/run/config.yaml" || fail "the refused run wrote config.yaml"
  for log in "$work"/run/rank*.log; do
    [ "$(grep -c ' on host ' "$log")" -eq 1 ] || fail "the refused run logged into $log"
  done
  absent "$work/run/moco.lock"
  # A run killed (kill -9, every rank) leaves its lock file; it does not block a restart.
  background_ranks "$dist" "${long[@]}" train.output_dir="$work/killed" >"$work/killed.console" 2>&1 &
  victim=$!
  wait_for_steps "$victim" "$work/killed"
  stop_ranks KILL "$victim"
  wait "$victim" || true
  [ -s "$work/killed/moco.lock" ] || fail "the killed run left no lock file (this case needs one)"
  expect 0 "" -- ranks "$dist" "${long[@]}" train.output_dir="$work/killed" train.stop_at_step=$(($(step_logged "$work/killed") + 2))
  absent "$work/killed/moco.lock"
  ;;
lincls_locked)
  pretrain
  hold_lock "$work/lin"
  expect 2 "train.output_dir '$work/lin' is in use by another run: host $(hostname) pid $holder holds its lock $work/lin/moco.lock" -- \
    ranks "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$step" train.output_dir="$work/lin"
  kill "$holder"
  wait "$holder" || true
  [ "$(ls "$work/lin")" = moco.lock ] || fail "the refused run wrote into $work/lin: $(ls "$work/lin")"
  ;;
pack_locked)
  image_folder
  hold_lock "$work/out"
  expect 2 "OUT $work/out is in use by another pack: host $(hostname) pid $holder holds its lock $work/out/moco.lock" -- \
    "$pack" "$work/if" "$work/out"
  kill "$holder"
  wait "$holder" || true
  [ "$(ls "$work/out")" = moco.lock ] || fail "the refused pack wrote into OUT: $(ls "$work/out")"
  # The lock file its holder left does not block the next pack, which removes it when done.
  expect 0 "train: 8 images" -- "$pack" "$work/if" "$work/out"
  absent "$work/out/moco.lock"
  ;;
output_dir_deleted)
  # train.output_dir deleted mid-run: noticed after the next step (before any checkpoint could make
  # it again), exit 1 naming the folder. Before, the run went on to exit 0, writing its metrics, log
  # and config into deleted files.
  # Long enough never to end by itself before the deletion is noticed (20 epochs took 1.7 s in CI).
  background_ranks "$dist" --config "$tiny" train.threads=1 data.synthetic_train_size=256 train.epochs=5000 knn.k=5 \
    ckpt.every_minutes=0 train.output_dir="$work/run" >"$work/console" 2>&1 &
  pid=$!
  wait_for_steps "$pid" "$work/run"
  for _ in 1 2 3 4 5; do rm -rf "$work/run" 2>/dev/null && break; done  # again if a file appeared meanwhile
  rc=0
  wait "$pid" || rc=$?
  cat "$work/console"
  [ "$rc" -eq 1 ] || fail "exit $rc after the output folder was deleted"
  # The folder gone, or (rm -r takes the files first) its rank0.log: either way named by the folder.
  grep -F "train.output_dir '$work/run': " "$work/console" | grep -q "while the run writes into it" ||
    fail "no error naming the folder"
  absent "$work/run"
  ;;
rank_log_deleted)
  # One rank's log deleted under a running job (np 2: rank 1's): that rank stops the job, and its
  # reason reaches the terminal though that rank logs to its file alone and the abort ends rank 0
  # before it could say anything.
  background_ranks "$dist" --config "$tiny" train.threads=1 data.synthetic_train_size=256 train.epochs=5000 knn.k=5 \
    ckpt.every_minutes=0 train.output_dir="$work/run" >"$work/console" 2>&1 &
  pid=$!
  wait_for_steps "$pid" "$work/run"
  rm "$work/run/rank$((np - 1)).log"
  rc=0
  wait "$pid" || rc=$?
  cat "$work/console"
  [ "$rc" -ne 0 ] || fail "exit 0 after a rank's log was deleted"
  grep -F "train.output_dir '$work/run': its $work/run/rank$((np - 1)).log was deleted or replaced while the run writes into it" \
    "$work/console" || fail "the terminal does not say why the job stopped"
  ;;
lincls_output_dir_deleted)
  pretrain
  # Long enough never to end by itself before the deletion is noticed (400 epochs took 0.5 s in CI).
  background_ranks "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$step" lincls.epochs=1000000 \
    lincls.save_every_epochs=0 train.output_dir="$work/lin" >"$work/console" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q '"event":"lincls"' "$work/lin/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null || fail "moco_lincls ended before its folder could be deleted"
  for _ in 1 2 3 4 5; do rm -rf "$work/lin" 2>/dev/null && break; done
  rc=0
  wait "$pid" || rc=$?
  cat "$work/console"
  [ "$rc" -eq 1 ] || fail "exit $rc after the output folder was deleted"
  # The folder gone, or (rm -r takes the files first) its rank0.log: either way named by the folder.
  grep -F "train.output_dir '$work/lin': " "$work/console" | grep -q "while the run writes into it" ||
    fail "no error naming the folder"
  absent "$work/lin"
  ;;
output_dir_misplaced)
  # A train.output_dir inside another run's checkpoints/ (a committed step of it, the folder itself, a
  # new folder there): accepted, and that run's retention later deleted it whole. Refused before
  # anything is made, moco_lincls and --dry-run alike; so is one inside the folder of a running run.
  pretrain
  snapshot "$work/run" >"$work/before"
  for out in "$step" "$step/sub" "$work/run/checkpoints" "$work/run/checkpoints/new"; do
    expect 2 "train.output_dir '$out' lies inside $work/run/checkpoints, another run's checkpoints folder: its retention (ckpt.keep_last) deletes what it does not keep there, a folder whole" -- \
      ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$out" train.stop_at_step=1 knn.k=5
  done
  expect 2 "train.output_dir '$work/run/checkpoints/new' lies inside $work/run/checkpoints" -- \
    ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run/checkpoints/new" --dry-run
  expect 2 "train.output_dir '$work/run/checkpoints/lin' lies inside $work/run/checkpoints" -- \
    ranks "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random train.output_dir="$work/run/checkpoints/lin"
  snapshot "$work/run" | diff "$work/before" - || fail "the run's folder changed"
  # Inside the folder of a running run (a process holding its lock): refused, naming it.
  hold_lock "$work/live"
  expect 2 "train.output_dir '$work/live/sub' lies inside $work/live, the folder of a running run (host $(hostname) pid $holder holds its lock $work/live/moco.lock)" -- \
    ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/live/sub" train.stop_at_step=1 knn.k=5
  absent "$work/live/sub"
  kill "$holder"
  wait "$holder" || true
  # The lock file a run left when it was killed keeps no one out.
  expect 0 "stopped after step 1" -- \
    ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/live/sub" train.stop_at_step=1 knn.k=5
  ;;
lock_removed)
  # `rm moco.lock` under a training run (taken for a killed run's leftover), then the same command:
  # the second run took a fresh lock and resumed from the first's checkpoint while the first trained
  # on, until one deleted the other's save. Now the second is refused before it writes anything (the
  # first still holds the lock's hidden twin, .moco.lock), and the first, seeing its moco.lock gone,
  # stops after its step with a checkpoint, from which the same command continues. The first is held
  # (SIGSTOP) from the rm until the second has been refused: the second starts before the first can
  # notice, the race at its worst.
  long=(--config "$tiny" train.threads=1 data.synthetic_train_size=256 train.epochs=5000 knn.k=5)
  background_ranks "$dist" "${long[@]}" train.output_dir="$work/run" >"$work/first.console" 2>&1 &
  first=$!
  wait_for_steps "$first" "$work/run"
  if [ "$np" -gt 1 ]; then rank0=$(pgrep -P "$first" | sort -n | head -1); else rank0=$first; fi
  stop_ranks STOP "$first"
  rm "$work/run/moco.lock"
  expect 2 "train.output_dir '$work/run' is in use by another run: host $(hostname) pid $rank0 holds its lock $work/run/moco.lock (the file was deleted; the run still holds .moco.lock, and stops after its step with a checkpoint)" -- \
    ranks "$dist" "${long[@]}" train.output_dir="$work/run" train.log_every=7 train.stop_at_step=1
  stop_ranks CONT "$first"
  # It stops by itself within a step (bounded: a run that does not notice would train 40000 steps).
  for _ in $(seq 300); do kill -0 "$first" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$first" 2>/dev/null && { stop_ranks KILL "$first"; fail "the first run did not stop within 60 s of its lock file's deletion"; }
  rc=0
  wait "$first" || rc=$?
  [ "$rc" -eq 0 ] || { tail -n 20 "$work/first.console"; fail "the first run ended with exit $rc"; }
  grep -qF "train.output_dir '$work/run': its lock $work/run/moco.lock was deleted while this run writes there" "$work/first.console" ||
    { tail -n 20 "$work/first.console"; fail "the first run did not say its lock file was deleted"; }
  grep -q "preempted by SIGUSR1 after step [0-9]* of [0-9]*: checkpoint $work/run/checkpoints/step_[0-9]* committed" "$work/first.console" ||
    fail "the first run did not stop with a checkpoint"
  ! grep -q "log_every: 7" "$work/run/config.yaml" || fail "the refused run wrote config.yaml"
  for log in "$work"/run/rank*.log; do
    [ "$(grep -c ' on host ' "$log")" -eq 1 ] || fail "the refused run logged into $log"
  done
  absent "$work/run/moco.lock"
  absent "$work/run/.moco.lock"
  stopped=$(step_logged "$work/run")
  expect 0 "resumed from $work/run/checkpoints/step_" -- \
    ranks "$dist" "${long[@]}" train.output_dir="$work/run" train.stop_at_step=$((stopped + 2))
  # moco.lock replaced at once by a file another process holds (a program that takes moco.lock alone):
  # the folder is that process's now; the run stops at once (exit 1), naming it.
  background_ranks "$dist" "${long[@]}" train.output_dir="$work/taken" ckpt.every_minutes=0 >"$work/taken.console" 2>&1 &
  victim=$!
  wait_for_steps "$victim" "$work/taken"
  "$py" - "$work/taken" <<'PY' &
import fcntl, os, socket, sys, time
f = open(sys.argv[1] + "/moco.lock.new", "w")
fcntl.flock(f, fcntl.LOCK_EX)
f.write(f"{socket.gethostname()} {os.getpid()}\n"); f.flush()
os.rename(sys.argv[1] + "/moco.lock.new", sys.argv[1] + "/moco.lock")
time.sleep(120)
PY
  holder=$!
  trap 'kill "$holder" 2>/dev/null || true' EXIT
  for _ in $(seq 300); do kill -0 "$victim" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$victim" 2>/dev/null && { stop_ranks KILL "$victim"; fail "the run did not stop within 60 s of its lock file's replacement"; }
  rc=0
  wait "$victim" || rc=$?
  cat "$work/taken.console"
  [ "$rc" -ne 0 ] || fail "the run whose lock was taken exited 0"
  grep -qF "train.output_dir '$work/taken': its lock $work/taken/moco.lock was replaced, and held by host $(hostname) pid $holder while this run writes there" \
    "$work/taken.console" || fail "the run does not name the process that holds its folder now"
  [ "$(cat "$work/taken/moco.lock")" = "$(hostname) $holder" ] || fail "the other process's moco.lock was removed"
  ;;
queue_too_large)
  expect 2 "key 'moco.queue_size'" "bytes of memory" -- \
    ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/out" moco.queue_size=1000000000
  absent "$work/out"
  ;;
config_two_documents)
  printf 'model: {arch: resnet_tiny}\n---\noptim: {batch_size: 8}\n' >"$work/two.yaml"
  # --print-config: read with its second document dropped, the file would print and exit 0 at once.
  expect 2 "$work/two.yaml: holds 2 YAML documents" -- "$dist" --config "$work/two.yaml" --print-config
  expect 2 "$work/two.yaml: holds 2 YAML documents" -- "$dist" --config "$work/two.yaml" train.output_dir="$work/out"
  absent "$work/out"
  ;;
config_override_two_documents)
  # A command-line value holding a second YAML document: refused as a file holding two is, naming
  # the key, for moco_dist and moco_lincls, before any work.
  two=$'[120]\n---\n[160]'
  expect 2 "key 'optim.milestones': holds 2 YAML documents" -- \
    "$dist" --config "$tiny" train.output_dir="$work/out" optim.milestones="$two" --print-config
  expect 2 "key 'optim.milestones': holds 2 YAML documents" -- \
    "$dist" --config "$tiny" train.output_dir="$work/out" optim.milestones="$two"
  absent "$work/out"
  expect 2 "key 'lincls.milestones': holds 2 YAML documents" -- \
    "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" train.output_dir="$work/out" lincls.milestones="$two"
  absent "$work/out"
  ;;
resume_refused_writes_nothing)
  pretrain
  # Into a new folder: another model.dim, and a resume path that is no checkpoint.
  expect 2 "model.dim" -- ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/new" model.dim=64 \
    train.resume="$step"
  absent "$work/new"
  expect 2 "train.resume: '$work/nothing' is not a committed checkpoint" -- \
    ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/new" train.resume="$work/nothing"
  absent "$work/new"
  # Into the run itself (train.resume=auto): its logs stay as they were.
  snapshot "$work/run" >"$work/before"
  expect 2 "model.dim" -- ranks "$dist" --config "$tiny" train.threads=1 train.output_dir="$work/run" model.dim=64
  snapshot "$work/run" | diff "$work/before" - || fail "the refused resume changed the run's folder"
  ;;
lincls_pretrained_not_hdf5)
  printf 'model: {arch: resnet_tiny}\n' >"$work/a.yaml"
  expect 2 "model.pretrained: $work/a.yaml is a file but not a \`moco_ckpt export\`" -- \
    ranks "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$work/a.yaml" train.output_dir="$work/out"
  absent "$work/out"
  ;;
lincls_inside_run)
  pretrain
  snapshot "$work/run" >"$work/before"
  for out in "$work/run/lincls" "$work/run/checkpoints/lincls"; do
    expect 2 "train.output_dir '$out' and model.pretrained" "may not write inside the pre-training run" -- \
      ranks "$lincls" --config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained="$step" train.output_dir="$out"
  done
  snapshot "$work/run" | diff "$work/before" - || fail "the run's folder changed"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
