#!/usr/bin/env bash
# launch/slurm/moco.sbatch with --cpus-per-task on a real (single-node) Slurm: the batch script passes
# it on to srun (SRUN_CPUS_PER_TASK), and each rank, with train.threads=0, sizes its intra-op threads
# to its CPUs: 2 tasks of --cpus-per-task=1 on a 2-CPU node log 1 cpu and 1 thread each, not 2.
#   slurm_cpus_test.sh BUILD_DIR WORK_DIR
# The cluster is tests/lib/slurm_cluster.sh's one node, declared with 2 CPUs (task/none: the ranks are
# not bound, so each takes its share of the node). Exit 77 (a skip that ctest shows) when not root:
# the Slurm daemons run as root.
set -euo pipefail
build=$(cd "$1" && pwd) work=$2 slow=${MOCO_TEST_SLOWDOWN:-1}
src=$(cd "$(dirname "$0")/../.." && pwd)
# Exactly 2 CPUs declared: --cpus-per-task=1 x 2 tasks fill the node, as 8 x 8 fill a 64-CPU GPU node.
slurm_cpus=2
# shellcheck source=tests/lib/slurm_one_node.sh
. "$src/tests/lib/slurm_one_node.sh"

run=$work/run
export MOCO_DIST=$build/moco_dist
job=$(cd "$work" && sbatch --parsable -N1 -n2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 \
      --output="$work/job.out" "$src/launch/slurm/moco.sbatch" "$src/tests/fixtures/tiny_synthetic.yaml" \
      train.output_dir="$run" train.threads=0 data.workers=0 train.epochs=1) || fail "sbatch"
echo "job $job"

state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
for _ in $(seq $((900 * slow))); do
  case $(state) in COMPLETED) break ;; FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) fail "job state $(state)" ;; esac
  sleep 0.2
done
[ "$(state)" = COMPLETED ] || fail "the job did not complete within $((180 * slow)) s (state $(state))"

grep -q "1 cpu(s) per task" "$work/job.out" || fail "the batch script did not see --cpus-per-task=1"
for rank in 0 1; do
  log=$run/rank$rank.log
  [ -f "$log" ] || fail "no $log"
  line=$(grep -m1 'intra-op thread' "$log") || fail "rank $rank logs no cores line: $(head -n 20 "$log")"
  echo "rank $rank: $line"
  [[ $line == *"cpus "*"(1 cpu(s)"*", 1 intra-op thread(s), 1 data worker(s)"* ]] || fail "rank $rank is not sized to 1 cpu: $line"
  grep -q "1 threads" "$log" || fail "rank $rank did not run with 1 thread: $(grep -m1 'threads' "$log")"
done
echo "PASS"
