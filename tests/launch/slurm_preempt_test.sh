#!/usr/bin/env bash
# A 2-rank CPU job of launch/slurm/moco.sbatch on a real (single-node) Slurm: preempted mid-run with
# SIGUSR1 to its batch shell, it must checkpoint, requeue itself (SLURM_RESTART_COUNT=1), resume
# from that checkpoint and finish, with metrics.jsonl logging every step exactly once; its
# train.output_dir holds a space and a '#'.
#   slurm_preempt_test.sh BUILD_DIR WORK_DIR
# The cluster is tests/lib/slurm_cluster.sh's one node (Slurm and munge from tools/install_deps.sh).
# Exit 77 (a skip that ctest shows) when not root: the Slurm daemons run as root. MOCO_TEST_SLOWDOWN=N
# (default 1) gives the job N times the time (tools/sanitize.sh: sanitized code runs a step several
# times slower).
set -euo pipefail
build=$(cd "$1" && pwd) work=$2 slow=${MOCO_TEST_SLOWDOWN:-1}
src=$(cd "$(dirname "$0")/../.." && pwd)
# 4 CPUs declared (more than a 2-core machine has): room for the 2 tasks whatever the machine.
slurm_cpus=4
# shellcheck source=tests/lib/slurm_one_node.sh
. "$src/tests/lib/slurm_one_node.sh"

# A folder YAML prints in double quotes (a space, a ' #'): moco.sbatch reads it back from
# --print-config to find metrics.jsonl, and once cut it at the space and never requeued.
run="$work/run #1"
export MOCO_DIST=$build/moco_dist OMP_NUM_THREADS=1
# 256 images in batches of 32: 8 steps an epoch, 160 steps in all; one step is logged per line.
job=$(cd "$work" && sbatch --parsable -N1 -n2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --output="$work/job.out" \
      "$src/launch/slurm/moco.sbatch" "$src/tests/fixtures/tiny_synthetic.yaml" train.output_dir="'$run'" train.threads=1 \
      data.synthetic_train_size=256 train.epochs=20 knn.memory_size=128 knn.query_size=64 ckpt.every_minutes=0) || fail "sbatch"
echo "job $job"

step_logged() {  # the highest step in metrics.jsonl
  grep -o '"step":[0-9]*' "$run/metrics.jsonl" 2>/dev/null | tr -dc '0-9\n' | sort -n | tail -n 1
}
state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }

for _ in $(seq $((600 * slow))); do
  [ "$(step_logged || echo 0)" -ge 20 ] 2>/dev/null && break
  case $(state) in COMPLETED | FAILED | CANCELLED | TIMEOUT) fail "the job ended before step 20: $(state)" ;; esac
  sleep 0.2
done
[ "$(step_logged)" -ge 20 ] || fail "no step 20 within $((120 * slow)) s"
scancel --batch --signal=USR1 "$job"
echo "SIGUSR1 sent at step $(step_logged)"

for _ in $(seq $((900 * slow))); do
  s=$(state)
  [ "$s" = COMPLETED ] && grep -q 'Restarts=1' <(scontrol show job "$job") && break
  case $s in FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) fail "job state $s" ;; esac
  sleep 0.2
done
[ "$(state)" = COMPLETED ] || fail "the job did not complete within $((180 * slow)) s of the signal (state $(state))"
grep -q 'Restarts=1' <<<"$(scontrol show job "$job")" || fail "the job did not restart once"

grep -q "restart 1:" "$work/job.out" || fail "no restart 1 in the job's output"
grep -q "requeueing job $job" "$work/job.out" || fail "the script did not requeue"
/usr/bin/python3 - "$run/metrics.jsonl" <<'PY' || fail "metrics.jsonl is not continuous"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
events = [r["event"] for r in rows]
steps = [r["step"] for r in rows if r["event"] == "train"]
assert steps == list(range(1, 161)), f"train rows: {steps[:5]}...{steps[-5:]} ({len(steps)} rows)"
preempted = [r for r in rows if r["event"] == "preempted"]
resumed = [r for r in rows if r["event"] == "resume"]
assert len(preempted) == 1 and preempted[0]["signal"] == "SIGUSR1", preempted
assert len(resumed) == 1 and resumed[0]["step"] == preempted[0]["step"], (resumed, preempted)
assert events.index("preempted") < events.index("resume"), events
assert rows[-1]["event"] == "knn" and rows[-1]["encoder"] == "trained", rows[-1]
print(f"steps 1..160 each logged once; preempted after step {preempted[0]['step']}, resumed from it; finished")
PY
echo "PASS"
