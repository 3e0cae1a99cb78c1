#!/usr/bin/env bash
# Elastic continuation on one machine (the multinode cases, with hosts lost, are in tests/multinode/):
#   elastic_test.sh CASE BUILD_DIR WORK_DIR
#   rank_killed        launch/mpirun/moco.sh -n 2 --max-restarts 1; one rank killed (-9) while rank 0
#                      writes step 24's checkpoint, a row left half-written: the job starts again on
#                      the same 2 ranks (no host dropped) from the newest verified checkpoint (16, not
#                      8), its restart row on a line of its own, and finishes, exit 0, every step
#                      logged once
#   rank_killed_twice  the same, a rank killed again after the restart: exit non-zero, saying no
#                      restart is left, one restart row
#   no_restart_after_stop  --max-restarts 2; SIGTERM to moco.sh, and another while the stop's checkpoint
#                      is written (the job ends at once, non-zero): not restarted, no restart row
#   full_disk          --max-restarts 1, train.output_dir on a 6 MiB tmpfs (a 4 MiB checkpoint every 8
#                      steps): step 16's does not fit, the job restarts from step 8 and fails there again:
#                      exit 1 saying no restart is left; step 8 still verifies (skipped, exit 77, where
#                      a tmpfs cannot be mounted)
#   no_restart_after_ranks_stopped  --max-restarts 1; SIGUSR1 to the ranks themselves (not to moco.sh):
#                      they stop with a checkpoint, but mpirun ends non-zero (MOCO_DIST, a wrapper,
#                      turns their exit 0 into 3): a stop, not restarted
#   world_divides_batch, world_divides_bn_splits  a hostfile of this machine (3 slots) and a host that
#                      never answers (a stand-in agent, 1 slot), --min-ranks 3: mpirun cannot start;
#                      the 3 slots left make a world of 2, the largest dividing optim.batch_size 32
#                      (moco.bn_splits 1), or, with optim.batch_size 48, the largest dividing
#                      moco.bn_splits 4 (which the 4 ranks divided): below 3, exit 1 saying so
#   world_divides_batch_no_bn_splits  the same for a method without moco.bn_splits (the v3 fixture):
#                      the batch alone bounds the world
#   host_dropped       the same with --min-ranks 1: the job starts again on this machine's 2 ranks,
#                      from the start (no checkpoint yet), and finishes; the failed attempt's
#                      metrics.jsonl, its restart row last, is kept as metrics.jsonl.1
#   sbatch_bound       launch/slurm/moco.sbatch given a config moco_dist refuses: exit 2 with moco_dist's
#                      words; then started as Slurm starts a requeued job (SLURM_JOB_ID,
#                      SLURM_RESTART_COUNT=1) after a failure Slurm requeued by itself, with the
#                      job's one restart used (--max-restarts 1): exit 1 before any step, saying so
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
export MOCO_DIST=$build/moco_dist OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 30 "$work/console" >&2; exit 1; }
run=$work/run
[ "$case_name" != full_disk ] || run=$work/disk/run
# 4 epochs of 16 steps, a checkpoint every 8.
args=("$src/tests/fixtures/tiny_synthetic.yaml" train.output_dir="$run" train.epochs=4 ckpt.every_steps=8
      ckpt.every_minutes=0 ckpt.async=false knn.memory_size=128 knn.query_size=64)
step_logged() { grep -o '"step":[0-9]*' "$run/metrics.jsonl" 2>/dev/null | tr -dc '0-9\n' | sort -n | tail -n 1; }
wait_for_step() {  # PID N: until step N is logged
  for _ in $(seq 600); do
    [ "$(step_logged || echo 0)" -ge "$2" ] 2>/dev/null && return 0
    kill -0 "$1" 2>/dev/null || fail "the run ended before step $2"
    sleep 0.2
  done
  fail "no step $2 within 120 s"
}
restart_rows() { grep '"event":"restart"' "$run/metrics.jsonl" 2>/dev/null || true; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'; }  # seconds since START
# A train row after the restart row: the restarted ranks train.
trained_again() { sed -n '/"event":"restart"/,$p' "$run/metrics.jsonl" 2>/dev/null | grep -q '"event":"train"'; }
# One rank of the job (a child of mpirun, which is a child of moco.sh PID) killed (-9).
kill_a_rank() {
  local rank
  rank=$(pgrep -f "^$MOCO_DIST " | head -n 1)
  [ -n "$rank" ] || fail "no rank to kill"
  kill -KILL "$rank"
}

case $case_name in
rank_killed | rank_killed_twice)
  if [ "$case_name" = rank_killed ]; then
    # Killed while rank 0 writes step 24's checkpoint (held there 5 s), after those of steps 8 and 16
    # were committed, and after it left a row half-written: the restart takes step 16, and its row a
    # line of its own.
    MOCO_CKPT_FAULT=pause_in_shard@24 "$src/launch/mpirun/moco.sh" -n 2 --max-restarts 1 "${args[@]}" >"$work/console" 2>&1 &
    pid=$!
    for _ in $(seq 600); do grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && break; kill -0 "$pid" || break; sleep 0.2; done
    grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" || fail "rank 0 did not pause in step 24's checkpoint"
    printf '{"event":"train","step":25,"lo' >>"$run/metrics.jsonl"
  else
    "$src/launch/mpirun/moco.sh" -n 2 --max-restarts 1 "${args[@]}" >"$work/console" 2>&1 &
    pid=$!
    wait_for_step "$pid" 10
  fi
  kill_a_rank
  start=$(date +%s.%N)
  for _ in $(seq 300); do restart_rows | grep -q . && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  restarted=$(since "$start")
  grep '^\[moco.sh\] restart' "$work/console" || fail "no restart"
  for _ in $(seq 600); do trained_again && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  echo "a rank killed: moco.sh restarted the job ${restarted}s after, its ranks trained again $(since "$start")s after"
  [ "$case_name" = rank_killed ] || kill_a_rank
  rc=0
  wait "$pid" || rc=$?
  if [ "$case_name" = rank_killed ]; then
    [ "$rc" -eq 0 ] || fail "exit $rc"
    grep -q "kNN top-1: .*random init" "$work/console" || fail "the run did not finish"
    [ "$(grep -c '^{"event":"train","step":25,"lo$' "$run/metrics.jsonl")" -eq 1 ] || fail "the row cut short is not left as it was"
    python3 "$src/tests/multinode/restart_log.py" "$run/metrics.jsonl" 64 1 || fail "metrics.jsonl across the restart"
    restart_rows | grep -q '^{"event":"restart",.*"hosts_dropped":\[\],.*"old_world":2,"new_world":2,"step":16,' ||
      fail "restart row: $(restart_rows)"
  else
    [ "$rc" -ne 0 ] || fail "exit 0 after a second failure with --max-restarts 1"
    grep '^\[moco.sh\] the job failed (exit [0-9]*) and no restart is left (1 of 1 used): stopping' "$work/console" ||
      fail "moco.sh does not say that no restart is left"
    [ "$(restart_rows | wc -l)" -eq 1 ] || fail "not one restart row: $(restart_rows)"
  fi
  [ -z "$(pgrep -f "^$MOCO_DIST ")" ] || fail "ranks left: $(pgrep -af "^$MOCO_DIST ")"
  ;;
no_restart_after_stop)
  MOCO_CKPT_FAULT=pause_in_shard "$src/launch/mpirun/moco.sh" -n 2 --max-restarts 2 "${args[@]}" >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  kill -TERM "$pid"
  for _ in $(seq 100); do grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" && break; sleep 0.1; done
  grep -q "MOCO_CKPT_FAULT: pausing" "$work/console" || fail "no checkpoint after the first SIGTERM"
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -ne 0 ] || fail "exit 0 after a second SIGTERM"
  grep '^\[moco.sh\] the job was asked to stop (SIGTERM): not restarted' "$work/console" || fail "moco.sh does not say it does not restart"
  ! grep -q '^\[moco.sh\] restart' "$work/console" && [ -z "$(restart_rows)" ] || fail "restarted after a stop"
  [ -z "$(pgrep -f "^$MOCO_DIST ")" ] || fail "ranks left: $(pgrep -af "^$MOCO_DIST ")"
  ;;
full_disk)
  mkdir -p "$work/disk"
  trap 'mountpoint -q "$work/disk" && umount "$work/disk"' EXIT
  mount -t tmpfs -o size=6m tmpfs "$work/disk" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
  start=$(date +%s.%N)
  rc=0
  "$src/launch/mpirun/moco.sh" -n 1 --max-restarts 1 "${args[@]}" >"$work/console" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  [ "$(grep -c 'step_00000016.tmp/shard-0-of-1.h5.*No space left on device' "$work/console")" -eq 2 ] || fail "the disk was not full twice"
  grep '^\[moco.sh\] restart 1 of 1 after exit 1: no host dropped; 1 rank(s) on .* from step 8' "$work/console" || fail "no restart from step 8"
  grep '^\[moco.sh\] the job failed (exit 1) and no restart is left (1 of 1 used): stopping' "$work/console" || fail "not stopped"
  "$build/moco_ckpt" verify "$run" >/dev/null || fail "step 8 does not verify"
  echo "a full disk: the job failed at step 16, restarted from step 8, failed there again; exit 1 $(since "$start")s after it started"
  ;;
no_restart_after_ranks_stopped)
  printf '#!/bin/bash\n[[ " $* " == *" --print-config "* ]] && exec "%s" "$@"\n"%s" "$@" && exit 3\n' "$MOCO_DIST" "$MOCO_DIST" \
    >"$work/moco_dist_exits_3"
  chmod +x "$work/moco_dist_exits_3"
  real=$MOCO_DIST
  MOCO_DIST=$work/moco_dist_exits_3 MOCO_CKPT=$build/moco_ckpt "$src/launch/mpirun/moco.sh" -n 2 --max-restarts 1 "${args[@]}" \
    >"$work/console" 2>&1 &
  pid=$!
  wait_for_step "$pid" 10
  pkill -USR1 -f "^$real "
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 3 ] || fail "exit $rc, not 3"
  grep -q '"event":"preempted"' "$run/metrics.jsonl" || fail "the ranks did not stop with a checkpoint"
  grep '^\[moco.sh\] the ranks stopped on a signal with a checkpoint: not restarted' "$work/console" || fail "not said"
  ! grep -q '^\[moco.sh\] restart' "$work/console" && [ -z "$(restart_rows)" ] || fail "restarted after the ranks stopped"
  ;;
world_divides_batch | world_divides_batch_no_bn_splits | world_divides_bn_splits | host_dropped)
  printf '#!/bin/sh\necho "agent (a stand-in): $1 does not answer" >&2\nexit 255\n' >"$work/agent"
  chmod +x "$work/agent"
  printf 'localhost slots=3\ndeadhost slots=1\n' >"$work/hosts"
  export MOCO_MPIRUN_ARGS="--mca plm_rsh_agent $work/agent --oversubscribe"
  rc=0
  case $case_name in
  world_divides_batch)
    "$src/launch/mpirun/moco.sh" --hostfile "$work/hosts" --max-restarts 1 --min-ranks 3 "${args[@]}" train.threads=1 \
      moco.bn_splits=1 >"$work/console" 2>&1 || rc=$?
    why="deadhost did not answer, localhost did: 3 rank(s) left, and the largest world of at most 3 that divides optim.batch_size 32 is 2, fewer than --min-ranks 3" ;;
  world_divides_batch_no_bn_splits)
    "$src/launch/mpirun/moco.sh" --hostfile "$work/hosts" --max-restarts 1 --min-ranks 3 \
      "$src/tests/fixtures/tiny_synthetic_v3.yaml" "${args[@]:1}" train.threads=1 >"$work/console" 2>&1 || rc=$?
    why="deadhost did not answer, localhost did: 3 rank(s) left, and the largest world of at most 3 that divides optim.batch_size 32 is 2, fewer than --min-ranks 3" ;;
  world_divides_bn_splits)
    "$src/launch/mpirun/moco.sh" --hostfile "$work/hosts" --max-restarts 1 --min-ranks 3 "${args[@]}" train.threads=1 \
      moco.bn_splits=4 optim.batch_size=48 >"$work/console" 2>&1 || rc=$?
    why="deadhost did not answer, localhost did: 3 rank(s) left, and the largest world of at most 3 that divides optim.batch_size 48 and moco.bn_splits 4 is 2, fewer than --min-ranks 3" ;;
  host_dropped)
    "$src/launch/mpirun/moco.sh" --hostfile "$work/hosts" --max-restarts 1 "${args[@]}" train.threads=1 moco.bn_splits=1 \
      >"$work/console" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || fail "exit $rc"
    grep '^\[moco.sh\] restart 1 of 1 after exit [0-9]*: deadhost dropped; 2 rank(s) on localhost (were 4), from the start (no checkpoint verifies)' \
      "$work/console" || fail "no restart on 2 ranks from the start"
    grep -q "kNN top-1: .*random init" "$work/console" || fail "the run did not finish"
    grep -q '^{"event":"restart",.*"hosts_dropped":\["deadhost"\],"hosts":\["localhost"\],"old_world":4,"new_world":2,"step":0,' \
      "$run/metrics.jsonl.1" || fail "no restart row in the failed attempt's metrics.jsonl.1"
    python3 "$src/tests/multinode/restart_log.py" "$run/metrics.jsonl" 64 0 || fail "metrics.jsonl of the run after the restart"
    echo "PASS ($case_name)"
    exit 0 ;;
  esac
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  grep "^\[moco.sh\] the job failed (exit [0-9]*); $why: stopping" "$work/console" || fail "not stopped for the reason expected"
  ! grep -q '^\[moco.sh\] restart' "$work/console" || fail "restarted"
  ;;
sbatch_bound)
  # A config moco_dist refuses: its own words reach the job's output (issue 57, W3), exit 2.
  rc=0
  bash "$src/launch/slurm/moco.sbatch" "${args[@]}" optim.base_lr=-1 >"$work/console" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "a refused config: exit $rc, not 2"
  grep -q "key 'optim.base_lr' must be positive" "$work/console" || fail "moco_dist's reason did not reach the output"
  # Slurm requeued job 7 by itself after a failure (the last row is a step's, not a stop's or a
  # restart's); its one restart was used by an earlier requeue.
  mkdir -p "$run"
  printf '%s\n' '{"event":"restart","launcher":"slurm","job":"7","restart":1,"max_restarts":1,"exit_code":1,"hosts_dropped":[],"old_world":2,"step":8}' \
    '{"event":"train","step":9,"loss":1.0}' >"$run/metrics.jsonl"
  rc=0
  SLURM_JOB_ID=7 SLURM_RESTART_COUNT=2 bash "$src/launch/slurm/moco.sbatch" --max-restarts 1 "${args[@]}" >"$work/console" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  grep -q "requeued after a failure, and no restart is left (1 of 1 used): stopping" "$work/console" || fail "not said why"
  # Another job's restarts are not this one's: job 8 may go on, as far as an srun that fails here.
  mkdir -p "$work/bin"
  printf '#!/bin/sh\necho "srun (a stand-in): failing" >&2\nexit 1\n' >"$work/bin/srun"
  chmod +x "$work/bin/srun"
  # Its rank 0 was killed while it wrote a row: the restart row goes on a line of its own.
  printf '{"event":"train","step":10,"lo' >>"$run/metrics.jsonl"
  SLURM_JOB_ID=8 SLURM_RESTART_COUNT=1 PATH=$work/bin:$PATH bash "$src/launch/slurm/moco.sbatch" --max-restarts 1 "${args[@]}" \
    >"$work/console" 2>&1 || true
  grep -q "requeued by Slurm after a failure: restart 1 of 1" "$work/console" || fail "job 8 was not let go on"
  grep -c '"job":"8"' "$run/metrics.jsonl" | grep -qx 1 || fail "job 8's restart is not logged once"
  grep '"job":"8"' "$run/metrics.jsonl" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); assert r["event"] == "restart" and r["restart"] == 1, r' ||
    fail "job 8's restart row is not a line of its own: $(tail -n 2 "$run/metrics.jsonl")"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
