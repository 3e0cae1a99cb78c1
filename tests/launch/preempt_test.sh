#!/usr/bin/env bash
# Stopping with a checkpoint outside Slurm, and the dry run. One case per ctest entry:
#   preempt_test.sh CASE BUILD_DIR WORK_DIR
#   mpirun_usr1     launch/mpirun/moco.sh with 2 ranks; SIGUSR1 to mpirun mid-run: exit 0, a checkpoint,
#                   the line saying how to resume; the same command finishes, every step logged once
#   plain_sigterm   a plain moco_dist (world of one) gets SIGTERM: the same
#   plain_sigint, plain_sighup   the same with SIGINT (Ctrl-C) and SIGHUP
#   second_signal   SIGTERM, and another while the stop's checkpoint is written: the process ends at once
#                   (killed by SIGTERM), no stop line
#   mpirun_sigterm  SIGTERM to launch/mpirun/moco.sh with 2 ranks: as mpirun_usr1, exit 0 (the script
#                   signals the ranks itself; mpirun would tear the job down and exit 1)
#   mpirun_group_sigint, mpirun_group_sigterm, mpirun_group_sighup  the signal to moco.sh's whole
#                   process group (a terminal's Ctrl-C, its closing, kill -- -PGID): mpirun must not get
#                   it too (it would tear the job down, exit 1): exit 0, a committed checkpoint
#   mpirun_second_signal  SIGTERM to moco.sh, and another while the stop's checkpoint is written: the
#                   job ends at once (non-zero), that checkpoint not committed
#   dry_run         --dry-run prints the config and the plan, exits 0, writes nothing
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export MOCO_DIST=$build/moco_dist OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 30 "$work/console" >&2; exit 1; }
run=$work/run
args=("$src/tests/fixtures/tiny_synthetic.yaml" train.output_dir="$run" data.synthetic_train_size=256 train.epochs=16
      knn.memory_size=128 knn.query_size=64 ckpt.every_minutes=0)

step_logged() { grep -o '"step":[0-9]*' "$run/metrics.jsonl" 2>/dev/null | tr -dc '0-9\n' | sort -n | tail -n 1; }
wait_for_step() {  # PID N: until step N is logged (or the process ends)
  for _ in $(seq 600); do
    [ "$(step_logged || echo 0)" -ge "$2" ] 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || fail "the run ended before step $2"
    sleep 0.2
  done
  fail "no step $2 within 120 s"
}
# Every step 1..128 (16 epochs of 8 steps: ample time for the signal to land mid-run) logged exactly once across the stop and the resume.
check_continuous() {
  /usr/bin/python3 - "$run/metrics.jsonl" "$1" <<'PY' || fail "metrics.jsonl is not continuous"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r["step"] for r in rows if r["event"] == "train"]
assert steps == list(range(1, 129)), f"{len(steps)} train rows: {steps[:3]}...{steps[-3:]}"
stops = [r for r in rows if r["event"] == "preempted"]
assert [r["signal"] for r in stops] == [sys.argv[2]], stops
assert [r["step"] for r in rows if r["event"] == "resume"] == [stops[0]["step"]]
print(f"stopped by {sys.argv[2]} after step {stops[0]['step']}, resumed, steps 1..128 each logged once")
PY
}

case $case_name in
mpirun_usr1 | mpirun_sigterm)
  sig=USR1
  [ "$case_name" = mpirun_sigterm ] && sig=TERM
  "$src/launch/mpirun/moco.sh" -n 2 "${args[@]}" >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  kill -"$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc after SIG$sig to moco.sh"
  grep -q "preempted by SIG$sig after step [0-9]*.*the same command continues from it" "$work/console" || fail "no resume hint"
  "$build/moco_ckpt" verify "$run" >/dev/null || fail "the checkpoint does not verify"
  "$src/launch/mpirun/moco.sh" -n 2 "${args[@]}" >"$work/console" 2>&1 || fail "the resumed run failed"
  grep -q "kNN top-1: .*random init" "$work/console" || fail "the resumed run did not finish"
  check_continuous "SIG$sig"
  ;;
mpirun_group_sigint | mpirun_group_sigterm | mpirun_group_sighup)
  sig=${case_name#mpirun_group_sig}
  sig=${sig^^}
  # moco.sh as a terminal's foreground job: the leader of its own process group (job control on here
  # for that; without it a background job would also ignore SIGINT), the signal sent to the group.
  set -m
  "$src/launch/mpirun/moco.sh" -n 2 "${args[@]}" >"$work/console" 2>&1 &
  pid=$!
  set +m
  [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] || fail "moco.sh does not lead its process group"
  wait_for_step "$pid" 10
  kill -"$sig" -- -"$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc after SIG$sig to moco.sh's process group"
  grep -q "preempted by SIG$sig after step [0-9]*.*the same command continues from it" "$work/console" || fail "no stop line"
  "$build/moco_ckpt" verify "$run" || fail "no committed checkpoint that verifies"
  echo "SIG$sig to the process group of moco.sh: exit 0, checkpoint committed"
  ;;
plain_sigterm | plain_sigint | plain_sighup)
  sig=${case_name#plain_sig}
  sig=${sig^^}
  "$build/moco_dist" --config "${args[@]}" train.threads=1 >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  kill -"$sig" "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc after SIG$sig"
  grep -q "preempted by SIG$sig after step" "$work/console" || fail "no stop line"
  "$build/moco_dist" --config "${args[@]}" train.threads=1 >"$work/console" 2>&1 || fail "the resumed run failed"
  check_continuous "SIG$sig"
  ;;
second_signal)
  # The stop's checkpoint held 5 s (MOCO_CKPT_FAULT), so that the second signal comes while it is written.
  MOCO_CKPT_FAULT=pause_in_shard "$build/moco_dist" --config "${args[@]}" train.threads=1 >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  kill -TERM "$pid"
  for _ in $(seq 100); do grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && break; sleep 0.1; done
  grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" || fail "no checkpoint after the first SIGTERM"
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 143 ] || fail "exit $rc after two SIGTERMs, not 143 (killed by SIGTERM)"
  ! grep -q "preempted by" "$work/console" || fail "it stopped gracefully after a second signal"
  echo "two SIGTERMs: exit $rc at once"
  ;;
signal_after_last_step)
  # SIGTERM while the final checkpoint is written (held 5 s by MOCO_CKPT_FAULT; no save before it):
  # the run had finished, so it evaluates and exits 0, and says what became of the signal.
  MOCO_CKPT_FAULT=pause_in_shard "$build/moco_dist" --config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 \
    train.output_dir="$run" ckpt.every_minutes=0 knn.k=5 >"$work/console" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && break; sleep 0.1; done
  grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" || fail "no pause in the final checkpoint"
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "exit $rc, not 0"
  grep -q "kNN top-1: .*trained" "$work/console" || fail "no final kNN"
  grep -q "SIGTERM came after the last step (during the final checkpoint or kNN evaluation): the run had finished, $run/checkpoints/step_00000004 is committed" \
    "$work/console" || fail "the signal is not said"
  ;;
dry_run)
  "$build/moco_dist" --config "${args[@]}" --dry-run >"$work/console" 2>&1 || fail "exit $?"
  grep -q "^  output_dir: $run$" "$work/console" || fail "no effective config"
  grep -q "data: synthetic (256 train / 128 test images of 1x16x16), 8 steps per epoch" "$work/console" || fail "no data plan"
  grep -q "schedule: 128 steps (16 epochs)" "$work/console" || fail "no schedule"
  grep -q "resume: none, a fresh start" "$work/console" || fail "no resume plan"
  [ ! -e "$run" ] || fail "the dry run wrote $run"
  "$build/moco_dist" --config "${args[@]}" train.stop_at_step=2 >/dev/null 2>&1
  "$build/moco_dist" --config "${args[@]}" --dry-run >"$work/console" 2>&1 || fail "exit $?"
  grep -q "resume: from $run/checkpoints/step_00000002 (train.resume=auto; every tensor verified)" "$work/console" || fail "no resume source"
  # A newer checkpoint whose shard is cut: the run would skip it, and the dry run says so.
  "$build/moco_dist" --config "${args[@]}" train.stop_at_step=4 >/dev/null 2>&1
  shard=$run/checkpoints/step_00000004/shard-0-of-1.h5
  truncate -s $(($(stat -c %s "$shard") / 2)) "$shard"
  "$build/moco_dist" --config "${args[@]}" --dry-run >"$work/console" 2>&1 || fail "exit $?"
  grep -q "resume: would skip .*$run/checkpoints/step_00000004" "$work/console" || fail "the cut step 4 is not named"
  grep -q "resume: from $run/checkpoints/step_00000002 (train.resume=auto" "$work/console" ||
    fail "the dry run does not name step 2, which the run would resume from: $(grep resume: "$work/console")"
  rc=0
  "$build/moco_dist" --config "${args[@]}" --dry-run data.dataset=mnist data.root="$work/nowhere" >"$work/console" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && grep -q "$work/nowhere" "$work/console" || fail "a missing data root passed the dry run"
  ;;
mpirun_second_signal)
  MOCO_CKPT_FAULT=pause_in_shard "$src/launch/mpirun/moco.sh" -n 2 "${args[@]}" >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  kill -TERM "$pid"
  for _ in $(seq 100); do grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && break; sleep 0.1; done
  grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" || fail "no checkpoint after the first SIGTERM"
  start=$(date +%s)
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -ne 0 ] || fail "exit 0 after a second SIGTERM"
  [ $(($(date +%s) - start)) -lt 4 ] || fail "it took $(($(date +%s) - start)) s to end (the pause is 5 s)"
  grep -q "second signal (TERM): ending the job now" "$work/console" || fail "no line about the second signal"
  ! grep -q "preempted by" "$work/console" || fail "it stopped gracefully after a second signal"
  [ ! -e "$run/checkpoints/latest" ] || fail "the interrupted checkpoint was committed"
  echo "two SIGTERMs to moco.sh: exit $rc at once, the stop's checkpoint not committed"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
