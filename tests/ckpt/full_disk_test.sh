#!/usr/bin/env bash
# A file system that fails under a run: full, removed, read-only, slow. One case per ctest entry:
#   full_disk_test.sh CASE BUILD_DIR WORK_DIR
#   full_async, full_sync  train.output_dir on a 6 MiB tmpfs, a checkpoint (4 MiB) every 8 steps: step 8
#                  commits, step 16 finds the disk full. Exit 1 naming the shard and "No space left
#                  on device", no crash, no .tmp left, step 8 still `latest` and verifying; with
#                  room again the same command resumes from step 8 and finishes
#   full_async_np2 the same on 2 ranks (mpirun): the error names the rank whose shard found the
#                  disk full (either may, whichever writes last) and that rank's shard
#   full_manifest, full_latest  every shard of step 16 written fine, then the disk full exactly when
#                  the manifest (MOCO_CKPT_FAULT=pause_before_manifest@16) or `latest`
#                  (pause_before_latest@16, the folder renamed already) is written: the test fills
#                  the disk during the pause. Exit 1 naming manifest.json or latest.tmp and "No space
#                  left on device", step 8 still `latest` and verifying, no step_00000016 (the renamed
#                  folder taken back), no .tmp folder, no latest.tmp; with room again it resumes
#                  (ckpt.async=false: the loop, paused too, writes no log line to the full disk)
#   full_metrics, full_tensorboard  the tmpfs filled up after step 8's commit: the resumed run
#                  cannot append to metrics.jsonl (train.tensorboard=false) or to its TensorBoard
#                  event file; exit 1 naming it, step 8 still verifies; with room again it finishes
#                  (rank0.log lies on a disk with room: a symlink)
#   full_log       rank0.log on a disk of its own that is full (a symlink to a full 64 KiB tmpfs)
#                  from the resumed run's first line on: exit 1 after step 9 ("step 10: ...") naming rank0.log and "No
#                  space left on device" (not spdlog's "LOG ERROR" and on), step 8 still verifies;
#                  with the log back the same command finishes
#   lincls_full_log  the same for moco_lincls (model.pretrained=random, a checkpoint at step 8): exit 1
#                  naming rank0.log, not a run trained on to the end; step 8 still verifies
#   export_full    moco_ckpt export onto a 64 KiB tmpfs: exit 1 naming OUT and "No space left on
#                  device", neither OUT nor a temporary file left
#   pack_full      moco_pack into a 64 KiB tmpfs: exit 1 naming a shard and "No space left on
#                  device", no shard and no temporary file left
#   removed        checkpoints/ deleted while a shard is being written: exit 1 naming the file, no crash
#   read_only      checkpoints/ made read-only (a read-only bind mount) while a shard is being
#                  written: exit 1 naming the file; the committed step 8 verifies
#   slow_writer    a save slower than the cadence (MOCO_CKPT_FAULT=pause_in_shard@8 holds it 5 s,
#                  a checkpoint every 2 steps): the next save waits for it and the log says so
# Exit 77 (skipped) where a tmpfs cannot be mounted (not root, no mount permission).
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 20 "$work/console" >&2; exit 1; }
disk=$work/disk run=$work/disk/run small=$work/small
cleanup() {
  mountpoint -q "$small" 2>/dev/null && umount "$small"
  mountpoint -q "$run/checkpoints" 2>/dev/null && umount "$run/checkpoints"
  mountpoint -q "$disk" 2>/dev/null && umount "$disk"
  return 0
}
trap cleanup EXIT
cleanup
rm -rf "$work" && mkdir -p "$disk"
mount -t tmpfs -o size=6m tmpfs "$disk" 2>/dev/null || { echo "SKIP ($case_name): cannot mount a tmpfs here"; exit 77; }
args=(--config "$src/tests/fixtures/tiny_synthetic.yaml" train.output_dir="$run" train.threads=1 train.epochs=2
      ckpt.every_steps=8 ckpt.every_minutes=0 knn.memory_size=128 knn.query_size=64)

# CMD...: runs it into $work/console, echoes its exit code.
run_rc() { local rc=0; "$@" >"$work/console" 2>&1 || rc=$?; echo "$rc"; }
# The failure's guarantees: exit 1 (no crash), the named file in the error, step 8 committed and whole.
check_failed_cleanly() {  # RC TEXT
  [ "$1" -eq 1 ] || fail "exit $1, not 1"
  grep -Eq "\[(error|critical)\].*$2" "$work/console" || fail "no error naming '$2'"
  ! grep -q "HDF5-DIAG\|Segmentation\|Aborted\|signal 11" "$work/console" || fail "HDF5's stack or a crash in the output"
  [ "$(cat "$run/checkpoints/latest")" = step_00000008 ] || fail "latest is $(cat "$run/checkpoints/latest")"
  "$build/moco_ckpt" verify "$run" >/dev/null || fail "step 8 does not verify"
}
check_resumes() {
  mount -o remount,size=64m "$disk"
  [ "$(run_rc "$build/moco_dist" "${args[@]}")" -eq 0 ] || fail "the resumed run failed"
  grep -q "resumed from $run/checkpoints/step_00000008" "$work/console" || fail "did not resume from step 8"
  grep -q "kNN top-1: .*after 32 steps" "$work/console" || fail "the resumed run did not finish"
}
# Waits until the writer thread holds its shard half-written (MOCO_CKPT_FAULT=pause_in_shard).
wait_for_pause() {  # PID
  for _ in $(seq 300); do
    grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && return 0
    kill -0 "$1" 2>/dev/null || fail "the run ended before the pause"
    sleep 0.1
  done
  fail "no pause within 30 s"
}

case $case_name in
full_async | full_sync)
  async=true
  [ "$case_name" = full_sync ] && async=false
  rc=$(run_rc "$build/moco_dist" "${args[@]}" ckpt.async=$async)
  check_failed_cleanly "$rc" "step_00000016.tmp/shard-0-of-1.h5.*No space left on device"
  ! ls -d "$run"/checkpoints/*.tmp 2>/dev/null || fail "a .tmp folder is left"
  echo "disk full at step 16 (ckpt.async=$async): exit 1, $(grep -o 'rank 0: [^(]*' "$work/console" | head -n 1)"
  check_resumes
  ;;
full_async_np2)
  rc=$(run_rc mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$build/moco_dist" "${args[@]}")
  # \2: the rank (group 1 is check_failed_cleanly's "error|critical"); its own shard must be named.
  check_failed_cleanly "$rc" "rank ([01]): .*step_00000016.tmp/shard-\2-of-2.h5.*No space left on device"
  ! ls -d "$run"/checkpoints/*.tmp 2>/dev/null || fail "a .tmp folder is left"
  echo "disk full at step 16 on 2 ranks: exit 1, $(grep -Eo 'rank [01]: [^(]*shard-[01]-of-2[^(]*' "$work/console" | head -n 1)"
  check_resumes
  ;;
full_manifest | full_latest)
  where=${case_name#full_}
  mount -o remount,size=64m "$disk"  # room for step 16's shard; the pause fills it after
  MOCO_CKPT_FAULT=pause_before_$where@16 "$build/moco_dist" "${args[@]}" ckpt.async=false >"$work/console" 2>&1 &
  pid=$!
  wait_for_pause "$pid"
  dd if=/dev/zero of="$disk/filler" bs=4k 2>/dev/null || true  # until the disk is full
  rc=0
  wait "$pid" || rc=$?
  named="$run/checkpoints/step_00000016.tmp/manifest.json: cannot write: No space left on device"
  [ "$where" = latest ] && named="$run/checkpoints/latest.tmp: cannot write: No space left on device"
  check_failed_cleanly "$rc" "$named"
  cp "$work/console" "$work/failed.console"  # check_resumes reuses console
  ! ls -d "$run"/checkpoints/*.tmp 2>/dev/null || fail "a .tmp folder is left"
  [ ! -e "$run/checkpoints/step_00000016" ] || fail "step_00000016 is left under its final name"
  [ ! -e "$run/checkpoints/latest.tmp" ] || fail "latest.tmp is left"
  echo "disk full at step 16's $where: exit 1, $(grep -o "$run/checkpoints/[^ ]*: cannot write: No space left on device" "$work/console" | head -n 1)"
  rm "$disk/filler"
  check_resumes
  ;;
full_metrics | full_tensorboard)
  file=metrics.jsonl tb=false
  [ "$case_name" = full_tensorboard ] && file=tfevents tb=true
  args+=(train.tensorboard=$tb)
  [ "$(run_rc "$build/moco_dist" "${args[@]}" train.stop_at_step=8)" -eq 0 ] || fail "the first run failed"
  # rank0.log off the full disk (a symlink to a disk with room): else it may fail first (case full_log).
  mv "$run/rank0.log" "$work/rank0.log" && ln -s "$work/rank0.log" "$run/rank0.log"
  dd if=/dev/zero of="$disk/filler" bs=64k 2>/dev/null || true  # until the disk is full
  rc=$(run_rc "$build/moco_dist" "${args[@]}")
  check_failed_cleanly "$rc" "$run/.*$file.*No space left on device"
  rm "$disk/filler"
  echo "disk full for $file: exit 1, $(grep '\[error\]' "$work/console" | head -n 1 | cut -c27-)"
  check_resumes
  ;;
full_log)
  [ "$(run_rc "$build/moco_dist" "${args[@]}" train.stop_at_step=8)" -eq 0 ] || fail "the first run failed"
  mkdir -p "$small" && mount -t tmpfs -o size=64k tmpfs "$small"
  : >"$small/rank0.log"  # empty: its first line needs a page
  dd if=/dev/zero of="$small/filler" bs=4k 2>/dev/null || true  # until the disk is full
  rm "$run/rank0.log" && ln -s "$small/rank0.log" "$run/rank0.log"
  rc=$(run_rc "$build/moco_dist" "${args[@]}")
  check_failed_cleanly "$rc" "step 10: $run/rank0.log: cannot write the log: .*No space left on device"
  ! grep -q "LOG ERROR" "$work/console" || fail "spdlog's own error line: its handler is not ours"
  echo "disk full for rank0.log: exit 1, $(grep '\[error\]' "$work/console" | tail -n 1 | cut -c27-)"
  rm "$run/rank0.log" && umount "$small"
  check_resumes
  ;;
lincls_full_log)
  # moco_lincls (model.pretrained=random: no pre-training needed) as moco_dist in full_log.
  largs=(--config "$src/tests/fixtures/tiny_lincls.yaml" model.pretrained=random train.output_dir="$run" ckpt.async=false)
  [ "$(run_rc "$build/moco_lincls" "${largs[@]}" train.stop_at_step=8)" -eq 0 ] || fail "the first run failed"
  mkdir -p "$small" && mount -t tmpfs -o size=64k tmpfs "$small"
  : >"$small/rank0.log"
  dd if=/dev/zero of="$small/filler" bs=4k 2>/dev/null || true  # until the disk is full
  rm "$run/rank0.log" && ln -s "$small/rank0.log" "$run/rank0.log"
  rc=$(run_rc "$build/moco_lincls" "${largs[@]}")
  check_failed_cleanly "$rc" "$run/rank0.log: cannot write the log: .*No space left on device"
  ! grep -q "LOG ERROR" "$work/console" || fail "spdlog's own error line: its handler is not ours"
  ! grep -q "lincls epoch 1/" "$work/console" || fail "it trained on (to the end of epoch 1) without its log"
  echo "disk full for moco_lincls's rank0.log: exit 1, $(grep '\[error\]' "$work/console" | tail -n 1 | cut -c27-)"
  rm "$run/rank0.log" && umount "$small"
  [ "$(run_rc "$build/moco_lincls" "${largs[@]}")" -eq 0 ] || fail "the resumed run failed"
  grep -q "linear probe top-1" "$work/console" || fail "the resumed run did not finish"
  ;;
export_full | pack_full)
  mkdir -p "$small" && mount -t tmpfs -o size=64k tmpfs "$small"
  if [ "$case_name" = export_full ]; then
    mount -o remount,size=64m "$disk"
    [ "$(run_rc "$build/moco_dist" "${args[@]}" train.stop_at_step=8)" -eq 0 ] || fail "the training run failed"
    rc=$(run_rc "$build/moco_ckpt" export "$run" "$small/backbone.h5")
    named="export to $small/backbone.h5 failed, $small/backbone.h5 left as it was: $small/backbone.h5\.tmp-[0-9]+: "
  else
    /usr/bin/python3 "$src/tools/make_image_folder.py" "$disk/if" >/dev/null
    rc=$(run_rc "$build/moco_pack" "$disk/if" "$small/packed")
    named="$small/packed/(train|val)-[0-9]{5}-of-[0-9]{5}\.h5"
  fi
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  grep -Eq "$named.*No space left on device" "$work/console" || fail "no error naming $named and the disk full"
  ! grep -q "HDF5-DIAG\|Segmentation\|Aborted\|terminate called" "$work/console" || fail "HDF5's stack or a crash"
  left=$(cd "$small" && find . -type f | grep -v '^\./filler$' || true)
  [ -z "$left" ] || fail "left on the full disk: $left"
  echo "$case_name: exit 1, $(grep -E "No space left" "$work/console" | head -n 1)"
  ;;
removed | read_only)
  mount -o remount,size=64m "$disk"
  [ "$(run_rc "$build/moco_dist" "${args[@]}" train.stop_at_step=8)" -eq 0 ] || fail "the first run failed"
  MOCO_CKPT_FAULT=pause_in_shard@16 "$build/moco_dist" "${args[@]}" >"$work/console" 2>&1 &
  pid=$!
  wait_for_pause "$pid"
  if [ "$case_name" = removed ]; then
    rm -rf "$run/checkpoints"
  else
    mount --bind "$run/checkpoints" "$run/checkpoints" && mount -o remount,bind,ro "$run/checkpoints"
  fi
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  ! grep -q "HDF5-DIAG\|Segmentation\|Aborted" "$work/console" || fail "HDF5's stack or a crash in the output"
  grep -q "\[error\].*$run/checkpoints/step_00000016" "$work/console" || fail "no error naming the checkpoint"
  echo "$case_name: exit 1, $(grep '\[error\]' "$work/console" | head -n 1)"
  if [ "$case_name" = read_only ]; then
    [ "$(cat "$run/checkpoints/latest")" = step_00000008 ] || fail "latest is not step 8"
    "$build/moco_ckpt" verify "$run" >/dev/null || fail "step 8 does not verify"
    umount "$run/checkpoints"
    check_resumes
  fi
  ;;
slow_writer)
  mount -o remount,size=64m "$disk"
  # A key given twice is refused: the cadence and the length replaced in place.
  slow=("${args[@]/#ckpt.every_steps=8/ckpt.every_steps=2}")
  rc=$(run_rc env MOCO_CKPT_FAULT=pause_in_shard@8 "$build/moco_dist" "${slow[@]/#train.epochs=2/train.epochs=1}")
  [ "$rc" -eq 0 ] || fail "exit $rc"
  grep -q "checkpoint of step 10: the save of step 8 is still being written; waiting for it" "$work/console" ||
    fail "no line saying that the save of step 10 waits"
  grep -Eq "checkpoint of step 10: waited [2-5]\.[0-9]+s for the save of step 8" "$work/console" ||
    fail "no line saying how long it waited"
  # Only step 10's save comes while step 8's is held. (Another save may wait for its predecessor on a
  # loaded machine, where 2 steps can be shorter than an unpaused save: CI saw one.)
  n=$(grep -c "the save of step 8 is still being written" "$work/console")
  [ "$n" -eq 1 ] || fail "$n saves waited for step 8's, not 1 (only step 10's save comes while it is held)"
  "$build/moco_ckpt" verify "$run" >/dev/null || fail "the last checkpoint does not verify"
  grep "waited" "$work/console" | cut -c27-
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
