#!/usr/bin/env bash
# Faults end in known states. One case per ctest entry:
#   faults_test.sh CASE BUILD_DIR WORK_DIR [RANKS]   (RANKS: 2 by default; the peer cases also run with 4)
#   nan_skip    rank 1's queries of step 3 are NaN (MOCO_INJECT_NAN): both ranks skip step 3, the state
#               after it equals the state before it bit for bit, the run finishes, metrics count it
#   nan_skip_keys, nan_skip_loss, nan_skip_grads
#               the same with rank 1's keys, its loss alone, or its gradients alone NaN (MOCO_INJECT_NAN=3:1:WHAT);
#               the warning names the rank and what was not finite
#   nan_stop    the same with train.max_bad_steps=0: exit 1 naming the step and the rank
#   nan_skip_v3, nan_skip_keys_v3, nan_skip_loss_v3, nan_skip_grads_v3, nan_stop_v3
#               the same with MoCo v3 (tests/fixtures/tiny_synthetic_v3.yaml): queries (the query encoder's
#               images) and gradients on vit_tiny_cpu with AdamW and the official ViT predictor (its last
#               BN), keys and the loss on resnet_tiny with LARS; the state after the skipped step (the
#               momentum encoder, every BN buffer of both encoders and the predictor, AdamW's moments and
#               step count) equals the state before it bit for bit
#   nan_skip_keys_pieces, nan_skip_grads_pieces
#               v2's with optim.micro_batch 4 (each rank's 16 images in 4 pieces): a NaN in any piece
#               skips the whole step
#   stuck_peer  a rank stopped (SIGSTOP) mid-run: the others give up after dist.timeout_s naming the step,
#               the collective and, by roll call, the stopped rank; the job exits non-zero, nothing is left
#   dead_peer   a rank killed (SIGKILL) mid-run: the job exits non-zero at once, naming the rank
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3 ranks=${4:-2}
src=$(cd "$(dirname "$0")/../.." && pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 30 "$work/console" >&2; exit 1; }
base=(--config "$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 ckpt.every_minutes=0 ckpt.async=false)
method=v2
if [[ $case_name == *_pieces ]]; then
  case_name=${case_name%_pieces}
  base+=(optim.micro_batch=4)
fi
if [[ $case_name == *_v3 ]]; then
  method=v3 case_name=${case_name%_v3}
  base=(--config "$src/tests/fixtures/tiny_synthetic_v3.yaml" train.threads=1 ckpt.every_minutes=0 ckpt.async=false
        model.dim=32 v3.mlp_dim=64)
  case $case_name in
  nan_skip | nan_skip_grads)
    base+=(model.arch=vit_tiny_cpu v3.projector_layers=3 v3.predictor_last_bn=true optim.optimizer=adamw
           optim.base_lr=1.5e-4 optim.weight_decay=0.1 data.augmentation=v3) ;;
  *) base+=(optim.optimizer=lars optim.base_lr=0.3 optim.weight_decay=1e-6) ;;
  esac
fi
two() { mpirun -np 2 --oversubscribe "$build/moco_dist" "${base[@]}" "$@"; }
left_behind() { pgrep -f "train.output_dir=$work/" >/dev/null; }

case $case_name in
nan_skip | nan_skip_keys | nan_skip_loss | nan_skip_grads)
  # What the warning must say of rank 1 (a NaN query makes the loss and the gradients NaN too; with
  # shuffle-BN rank 1's NaN key images reach rank 0's key batch as well).
  case $method:$case_name in
  v2:nan_skip) what=queries warned='\(rank 1: queries, loss, gradients\)' ;;
  v2:nan_skip_keys) what=keys warned='\((rank 0: keys, loss, gradients; )?rank 1: keys, loss, gradients\)' ;;
  *:nan_skip_loss) what=loss warned='\(rank 1: loss\)' ;;
  v2:nan_skip_grads) what=grads warned='\(rank 1: gradients\)' ;;
  # v3's BatchNorms are SyncBN: rank 1's NaN reaches rank 0's statistics (forward) or its gradients
  # (the backward's all-reduce), so rank 0 is named as well.
  v3:nan_skip) what=queries warned='\(rank 0: queries, loss, gradients; rank 1: queries, loss, gradients\)' ;;
  v3:nan_skip_keys) what=keys warned='\(rank 0: keys, loss, gradients; rank 1: keys, loss, gradients\)' ;;
  v3:nan_skip_grads) what=grads warned='\(rank 0: gradients; rank 1: gradients\)' ;;
  esac
  two train.output_dir="$work/before" train.stop_at_step=2 >/dev/null 2>&1 || fail "the reference run failed"
  MOCO_INJECT_NAN=3:1:$what two train.output_dir="$work/skip" train.stop_at_step=3 >"$work/console" 2>&1 || fail "the run with a NaN failed"
  grep -Eq "step 3: NaN or Inf $warned: every rank skips the step" "$work/console" || fail "no skip warning naming rank 1's $what"
  "$build/moco_ckpt" diff "$work/before" "$work/skip" --ignore '^progress/' --ignore '^rng/' || fail "the skipped step changed the state"
  grep -q '"bad_steps":1,.*"event":"train",.*"step":3' "$work/skip/metrics.jsonl" || fail "metrics do not count the skip"
  MOCO_INJECT_NAN=3:1:$what two train.output_dir="$work/skip" >"$work/console" 2>&1 || fail "the resumed run failed"
  grep -q "kNN top-1: .*random init" "$work/console" || fail "the run did not finish"
  ;;
nan_stop)
  rc=0
  MOCO_INJECT_NAN=3:1 two train.output_dir="$work/stop" train.max_bad_steps=0 >"$work/console" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || fail "exit 0 with a NaN and train.max_bad_steps=0"
  named='rank 1: queries, loss, gradients'
  [ "$method" = v3 ] && named='rank 0: queries, loss, gradients; rank 1: queries, loss, gradients'  # SyncBN
  grep -q "step 3: NaN or Inf ($named), 1 step(s) in a row (train.max_bad_steps 0)" "$work/console" || fail "no error naming step and rank"
  ;;
stuck_peer | dead_peer)
  mpirun -np "$ranks" --oversubscribe "$build/moco_dist" "${base[@]}" train.output_dir="$work/run" train.epochs=200 dist.timeout_s=5 \
    >"$work/console" 2>&1 &
  job=$!
  for _ in $(seq 300); do grep -q '"step":10' "$work/run/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
  grep -q '"step":10' "$work/run/metrics.jsonl" || fail "no step 10 within 60 s"
  victim=$(pgrep -f "train.output_dir=$work/run" | xargs -r ps -o pid=,args= -p | grep -v mpirun | awk '{print $1}' | sort -n | tail -n 1)
  [ -n "$victim" ] || fail "no rank process found"
  victim_rank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  start=$(date +%s)
  if [ "$case_name" = stuck_peer ]; then kill -STOP "$victim"; else kill -KILL "$victim"; fi
  rc=0
  wait "$job" || rc=$?
  took=$(( $(date +%s) - start ))
  [ "$rc" -ne 0 ] || fail "the job exited 0"
  if [ "$case_name" = stuck_peer ]; then
    [ "$took" -le 35 ] || fail "took ${took}s with dist.timeout_s=5"
    grep -Eq "rank [0-9]+: step [0-9]+: [a-z_]+ #[0-9]+ did not complete within 5 s.*; rank $victim_rank did not answer a roll call" \
      "$work/console" || fail "no error naming the step, the collective and rank $victim_rank"
    grep -q "rank $victim_rank did not answer a roll call" "$work"/run/rank*.log || fail "no rank's log file holds the error"
  else
    [ "$took" -le 30 ] || fail "took ${took}s"
    grep -q "rank $victim_rank .* exited on signal 9" "$work/console" || fail "the dead rank ($victim_rank) is not named"
  fi
  sleep 1
  if left_behind; then pkill -KILL -f "train.output_dir=$work/" || true; fail "processes left behind"; fi
  echo "rank $victim_rank of $ranks ${case_name%_peer}: exit $rc after ${took}s"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
