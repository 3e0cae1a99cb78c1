#!/usr/bin/env bash
# launch/mpirun/moco.sh --hostfile across 2 test hosts (tests/multinode/hosts.sh), 2 ranks each
# (link_down_head_node: a third host launches):
#   multinode_test.sh CASE BUILD_DIR WORK_DIR
#   mpirun_2hosts  4 ranks, two hostnames, local ranks 0/1 on each, MPI bytes between the hosts over
#                  TCP (host 2's interface counters), the losses equal bitwise those of 4 ranks on one
#                  host, the shards of all 4 ranks in one checkpoint folder that verifies, metrics,
#                  TensorBoard and `latest` written once; the checkpoint resumes on 1 host x 2 ranks
#   host_lost      every rank on host 2 is killed (-9) mid-run: the job ends promptly naming them and
#                  their host, moco.sh exits non-zero, nothing is left, the last checkpoint verifies,
#                  the same command resumes and finishes
#   bad_link       host 2's link at 100 Mbit/s losing 1% of its packets each way (tc tbf, nftables;
#                  no netem here, so no delay): the same losses, bit for bit, as on a clean link
#   slurm_2nodes   a 2-node Slurm on the hosts (tests/lib/slurm_cluster.sh --hosts 2): sbatch -N2 --ntasks-per-node=2 of
#                  launch/slurm/moco.sbatch, SIGUSR1 mid-run: checkpoint, requeue (Restarts=1), resume,
#                  every step logged once
#   link_down_in_checkpoint  host 2's link goes down while rank 2 writes its shard (a 5 s pause
#                  there, MOCO_CKPT_FAULT=pause_in_shard:2@10): the step is not committed (left as
#                  .tmp), `latest` names the checkpoint before, the same command resumes from it
#   link_down      host 2's link goes down mid-run (dist.timeout_s=10): the ranks on host 1 exit within
#                  the timeout and a few seconds naming the step, the collective, ranks 2,3 and their host; moco.sh
#                  ends within a bound with a non-zero code; no process is left on either host; the last
#                  checkpoint verifies; with the link back the same command resumes and finishes
#   link_down_head_node  the same, launched from a third host that runs no ranks (a head or login
#                  node, not in the hostfile): moco.sh sees a daemon end, not ranks, and ends mpirun
#   elastic_link_down  moco.sh --max-restarts 2; host 2's link goes down mid-epoch: moco.sh drops host
#                  2 (it does not answer the agent) and the job goes on from the last checkpoint on host
#                  1's 2 ranks and finishes, exit 0, every step logged once (restart_log.py), nothing
#                  left; the steps after the restart equal, loss for loss and in the final checkpoint
#                  (moco_ckpt diff), those of the same checkpoint resumed by hand on host 1's 2 ranks
#   elastic_link_down_head_node  the same (without the comparison), launched from a third host
#   elastic_min_ranks  hosts of 3 and 1 slots, --min-ranks 3: host 2 lost, the 3 slots left make a
#                  world of 2 (the largest dividing the batch and moco.bn_splits), below the minimum:
#                  exit 1 saying so, no restart
#   elastic_link_flap  --max-restarts 1; host 2's link down for 3 s (less than dist.timeout_s=10): TCP
#                  resends, the job goes on without a restart, exit 0, every step logged once
#   elastic_lost_twice  --max-restarts 1: host 2's link down, back up while moco.sh probes (a flap):
#                  host 2 is kept, the job restarts on 4 ranks; the link down again: exit 1 after one
#                  restart, saying none is left
#   slurm_node_killed  a 3-node Slurm; sbatch -N2 of moco.sbatch, node 2 killed mid-run (hosts.sh
#                  kill: its link down, every process in it gone, slurmd too): the step fails, node 2
#                  does not answer a probe, Slurm sets it DOWN and requeues the job, which runs again on
#                  mocohost1 and mocohost3, resumes and finishes, every step logged once
# Exits 77 (ctest's skip) where network namespaces cannot be made (not root, no iproute2).
set -euo pipefail
case_name=$1 build=$(cd "$2" && pwd) work=$3
src=$(cd "$(dirname "$0")/../.." && pwd)
hosts=$src/tests/multinode/hosts.sh
why=$("$hosts" can) || { echo "SKIP: $why"; exit 77; }
# Hosts left by an earlier run killed outright (SIGKILL leaves no trap to run) go first.
[ ! -f "$work/hosts/n" ] || "$hosts" down "$work/hosts" >&2 || true
rm -rf "$work" && mkdir -p "$work"
echo $$ >"$work/owner"  # the deadline below acts only while the hosts are this run's
export MOCO_HOSTS_DIR=$work/hosts MOCO_DIST=$build/moco_dist OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL ($case_name): $*" >&2; [ -f "$work/console" ] && tail -n 30 "$work/console" >&2; exit 1; }
# Down on every exit, also a failed or timed-out one; down itself checks that nothing is left.
# A deadline of its own, before ctest's TIMEOUT: the hosts go down (which ends every process on them,
# moco.sh included), so the script gets to fail and to run its trap.
limit=${MOCO_MULTINODE_LIMIT_S:-200}
(
  trap 'kill $nap 2>/dev/null; exit 0' TERM
  sleep "$limit" & nap=$!
  wait $nap && [ "$(cat "$work/owner" 2>/dev/null)" = $$ ] && echo "FAIL ($case_name): still running after ${limit}s" >&2 \
    && "$hosts" down "$MOCO_HOSTS_DIR" >&2
) &
deadline=$!
extra_cleanup=:  # what a case started outside the hosts (slurm_2nodes: munged), undone before the hosts go
trap 'kill $deadline 2>/dev/null; $extra_cleanup; "$hosts" down "$MOCO_HOSTS_DIR" >&2 || { echo "FAIL ($case_name): the hosts were not cleaned up" >&2; exit 1; }' EXIT
# link_down_head_node launches from a third host that runs no ranks (a head or login node);
# slurm_node_killed has a third node to go on with.
nhosts=2
case $case_name in link_down_head_node | elastic_link_down_head_node | slurm_node_killed) nhosts=3 ;; esac
"$hosts" up "$nhosts" "$MOCO_HOSTS_DIR"
net=10.77.0.0/24
printf 'mocohost1 slots=2\nmocohost2 slots=2\n' >"$work/hostfile"
# The daemons start through the agent; every byte between ranks and daemons goes over the test bridge.
export MOCO_MPIRUN_ARGS="--mca plm_rsh_agent $MOCO_HOSTS_DIR/agent --mca oob_tcp_if_include $net
  --mca btl self,vader,tcp --mca btl_tcp_if_include $net"
on() { local i=$1; shift; "$hosts" exec "$i" "$@"; }
launcher=1  # the host moco.sh runs on
launch() { on "$launcher" "$src/launch/mpirun/moco.sh" "$@"; }
args=("$src/tests/fixtures/tiny_synthetic.yaml" train.threads=1 moco.bn_splits=4 ckpt.every_minutes=0
      ckpt.async=false knn.memory_size=128 knn.query_size=64)
short=("${args[@]}" train.epochs=1)  # a key given twice is refused: the longer runs give their own
# Nothing but the holder may be left inside a host once a run has ended.
left_on() { "$hosts" pids "$1" | grep -vx "$(cat "$MOCO_HOSTS_DIR/holder$1.pid" 2>/dev/null)" | xargs -r ps -o pid=,args= -p || true; }
left_anywhere() { local i; for i in $(seq "$nhosts"); do left_on "$i"; done; }
check_nothing_left() {  # WHEN: within 5 s (a daemon's last moments after mpirun returned)
  local i
  for _ in $(seq 25); do [ -z "$(left_anywhere)" ] && break; sleep 0.2; done
  for i in $(seq "$nhosts"); do [ -z "$(left_on "$i")" ] || fail "left on host $i after $1: $(left_on "$i")"; done
}
ranks_on() { "$hosts" pids "$1" | xargs -r ps -o pid=,comm= -p | awk '$2 == "moco_dist" {print $1}'; }
wait_step() {  # STEP RUN_DIR JOB_PID: until metrics.jsonl has STEP (120 s at most)
  for _ in $(seq 600); do grep -q "\"step\":$1\b" "$2/metrics.jsonl" 2>/dev/null && return; kill -0 "$3" || break; sleep 0.2; done
  fail "no step $1 within 120 s"
}
resume_and_finish() {  # LAST: the same command ("${cmd[@]}") resumes from step LAST and finishes
  launch "${cmd[@]}" >"$work/console" 2>&1 || fail "the resumed run failed"
  grep -q "kNN top-1: .*random init" "$work/console" || fail "the resumed run did not finish"
  grep -q "\"event\":\"resume\".*\"step\":$1\b\|\"step\":$1,.*\"event\":\"resume\"" "$run/metrics.jsonl" \
    || fail "no resume row at step $1"
  check_nothing_left "the resumed run"
  echo "resumed from step $1 and finished"
}
rx_bytes() { on 2 awk '$1 == "eth0:" {print $2}' /proc/net/dev; }  # /proc/net is the reader's namespace's
losses() { python3 -c 'import json, sys; print(" ".join(repr(r["loss"]) for r in map(json.loads, open(sys.argv[1])) if r["event"] == "train"))' "$1"; }
# The elastic cases' run: 4 epochs of 16 steps, a checkpoint every 8, all kept (the comparison
# resumes the one a restart resumed).
elastic=("${args[@]}" train.epochs=4 ckpt.every_steps=8 ckpt.keep_last=100 dist.timeout_s=10)
restart_rows() { grep '"event":"restart"' "$1/metrics.jsonl" 2>/dev/null || true; }
# FIELD: its value in the run's one restart row.
restart_field() { restart_rows "$run" | python3 -c 'import json, sys; print(json.dumps(json.loads(sys.stdin.readline())[sys.argv[1]]))' "$1"; }
# A train row after the restart row: the restarted ranks train.
trained_again() { sed -n '/"event":"restart"/,$p' "$run/metrics.jsonl" 2>/dev/null | grep -q '"event":"train"'; }
wait_console() {  # TEXT SECONDS: until the console has TEXT (moco.sh still running)
  for _ in $(seq $(($2 * 5))); do grep -q -- "$1" "$work/console" && return; kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
  grep -q -- "$1" "$work/console" || fail "no '$1' within $2 s"
}

case $case_name in
mpirun_2hosts)
  two=$work/two one=$work/one
  before=$(rx_bytes)
  NCCL_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5_0 launch --hostfile "$work/hostfile" "${short[@]}" train.output_dir="$two" \
    train.stop_at_step=8 >"$work/console" 2>&1 || fail "the 2-host run failed"
  moved=$(( $(rx_bytes) - before ))
  grep "^\[moco.sh\]" "$work/console" | grep -q -- "-x NCCL_IB_HCA -x NCCL_SOCKET_IFNAME" \
    || fail "moco.sh did not pass NCCL's settings to the other host: $(grep '^\[moco.sh\]' "$work/console")"
  check_nothing_left "the 2-host run"
  for r in 0 1 2 3; do
    h=$(( r / 2 + 1 )) l=$(( r % 2 ))
    grep -q "rank $r/4 on host mocohost$h, local rank $l/2, device cpu" "$two/rank$r.log" \
      || fail "rank $r is not logged as local rank $l on mocohost$h: $(grep -h ' on host ' "$two/rank$r.log")"
  done
  # The only way from host 1 to host 2 is the bridge, and vader (shared memory) only joins ranks of one
  # host: the bytes host 2 received are the job's TCP traffic (control messages are a few kB).
  [ "$moved" -gt 1000000 ] || fail "host 2 received only $moved bytes over the bridge"
  echo "host 2 received $moved bytes over the test bridge"
  # One folder holds the shards of the ranks of both hosts.
  for r in 0 1 2 3; do [ -f "$two/checkpoints/step_00000008/shard-$r-of-4.h5" ] || fail "no shard of rank $r"; done
  [ "$(cat "$two/checkpoints/latest")" = step_00000008 ] || fail "latest is '$(cat "$two/checkpoints/latest")', not step_00000008"
  "$build/moco_ckpt" verify "$two" >"$work/verify" 2>&1 || fail "moco_ckpt verify: $(cat "$work/verify")"
  # What the hosts share is written by rank 0 alone: one metrics.jsonl, one TensorBoard file.
  [ "$(find "$two" -name 'metrics.jsonl*' | wc -l)" -eq 1 ] || fail "more than one metrics.jsonl"
  [ "$(find "$two" -path '*tb*' -type f | wc -l)" -le 1 ] || fail "more than one TensorBoard file"
  # The same config on 4 ranks of one host: the same losses, bit for bit.
  MOCO_MPIRUN_ARGS= "$src/launch/mpirun/moco.sh" -n 4 "${short[@]}" train.output_dir="$one" train.stop_at_step=8 \
    >"$work/console" 2>&1 || fail "the 1-host run failed"
  [ "$(losses "$two/metrics.jsonl" | wc -w)" -eq 8 ] || fail "not 8 train rows: $(losses "$two/metrics.jsonl")"
  [ "$(losses "$two/metrics.jsonl")" = "$(losses "$one/metrics.jsonl")" ] \
    || fail "the losses differ: 2 hosts $(losses "$two/metrics.jsonl"), 1 host $(losses "$one/metrics.jsonl")"
  echo "losses of steps 1..8 equal on 2 hosts and on 1 host: $(losses "$two/metrics.jsonl")"
  # The 2-host checkpoint resumes on one host with 2 ranks and finishes.
  MOCO_MPIRUN_ARGS= launch -n 2 "${short[@]}" train.output_dir="$two" >"$work/console" 2>&1 || fail "the resumed run failed"
  grep -q "kNN top-1: .*random init" "$work/console" || fail "the resumed run did not finish"
  grep -q '"event":"resume".*"step":8\|"step":8.*"event":"resume"' "$two/metrics.jsonl" || fail "no resume row at step 8"
  [ "$(losses "$two/metrics.jsonl" | wc -w)" -eq 16 ] || fail "steps not logged once each: $(losses "$two/metrics.jsonl")"
  check_nothing_left "the resumed run"
  ;;
link_down | link_down_head_node)
  [ "$case_name" = link_down ] || launcher=3
  run=$work/run
  cmd=(--hostfile "$work/hostfile" "${args[@]}" train.output_dir="$run" train.epochs=4 ckpt.every_steps=5 dist.timeout_s=10)
  MOCO_MPIRUN_GRACE_S=5 launch "${cmd[@]}" >"$work/console" 2>&1 &
  job=$!
  wait_step 12 "$run" "$job"
  grep -q '"step":12' "$run/metrics.jsonl" || fail "no step 12 within 120 s"
  [ "$(ranks_on 1 | wc -l)" -eq 2 ] && [ "$(ranks_on 2 | wc -l)" -eq 2 ] || fail "not 2 ranks on each host"
  [ "$launcher" -le 2 ] || [ -z "$(ranks_on "$launcher")" ] || fail "ranks on the launcher's host $launcher"
  start=$(date +%s)
  "$hosts" link 2 down
  ranks1=-1 ranks2=-1
  for _ in $(seq 90); do  # 45 s: well past the bound below
    now=$(( $(date +%s) - start ))
    [ "$ranks1" -ge 0 ] || [ -n "$(ranks_on 1)" ] || ranks1=$now
    [ "$ranks2" -ge 0 ] || [ -n "$(ranks_on 2)" ] || ranks2=$now
    kill -0 "$job" 2>/dev/null || break
    sleep 0.5
  done
  ! kill -0 "$job" 2>/dev/null || fail "moco.sh still runs $(( $(date +%s) - start ))s after the link went down"
  rc=0
  wait "$job" || rc=$?
  took=$(( $(date +%s) - start ))
  echo "link down: host 1's ranks ended after ${ranks1}s, host 2's after ${ranks2}s, moco.sh after ${took}s with exit $rc"
  [ "$rc" -ne 0 ] || fail "moco.sh exited 0"
  [ "$ranks1" -ge 0 ] && [ "$ranks1" -le 18 ] || fail "host 1's ranks took ${ranks1}s with dist.timeout_s=10"
  [ "$ranks2" -ge 0 ] && [ "$ranks2" -le 18 ] || fail "host 2's ranks took ${ranks2}s with dist.timeout_s=10"
  [ "$took" -le 35 ] || fail "moco.sh took ${took}s"
  # What moco.sh saw of the job ending: its own ranks, or (on a host that runs none) a daemon's agent.
  seen="the ranks on this host ended"
  [ "$launcher" -le 2 ] || seen="a daemon on another host ended"
  grep "^\[moco.sh\] .* s ago and mpirun still waits" "$work/console" || fail "moco.sh did not end mpirun"
  grep -q "^\[moco.sh\] $seen" "$work/console" || fail "moco.sh does not say '$seen'"
  # The ranks name the step, the collective and the ranks across the cut: rank 0, and on host 2 the
  # first to time out (its abort may end the other before it logs).
  cut="step [0-9]+: [a-z_]+ #[0-9]+ did not complete within 10 s.*; ranks"
  grep -Eq "rank 0: $cut 2,3 did not answer a roll call \(dead or stuck\), on host mocohost2" "$run/rank0.log" \
    || fail "rank 0 does not name the step, the collective, ranks 2,3 and mocohost2: $(grep -h 'did not complete' "$run/rank0.log")"
  grep -Eq "rank [23]: $cut 0,1 did not answer a roll call \(dead or stuck\), on host mocohost1" "$run/rank2.log" \
    "$run/rank3.log" || fail "no rank on host 2 names the step, the collective, ranks 0,1 and mocohost1"
  # Host 2's daemon, cut off from mpirun, must notice by itself and end (orted_watchdog.sh,
  # MOCO_MPIRUN_GRACE_S=5 after its ranks ended); its agent on the launcher's host, which stays while
  # the link is down as ssh would, goes with mpirun's session (moco.sh).
  for _ in $(seq 60); do [ -z "$(left_anywhere)" ] && break; sleep 0.5; done
  check_nothing_left "the link went down"
  echo "nothing left on any host $(( $(date +%s) - start ))s after the link went down"
  "$build/moco_ckpt" verify "$run" >"$work/verify" 2>&1 || fail "the last checkpoint does not verify: $(cat "$work/verify")"
  last=$(( 10#$(sed 's/^step_//' "$run/checkpoints/latest") ))
  "$hosts" link 2 up
  resume_and_finish "$last"
  ;;
host_lost)
  run=$work/run
  cmd=(--hostfile "$work/hostfile" "${args[@]}" train.output_dir="$run" train.epochs=4 ckpt.every_steps=5 dist.timeout_s=10)
  MOCO_MPIRUN_GRACE_S=5 launch "${cmd[@]}" >"$work/console" 2>&1 &
  job=$!
  wait_step 12 "$run" "$job"
  victims=$(ranks_on 2 | xargs)
  [ "$(ranks_on 1 | wc -l)" -eq 2 ] && [ "$(wc -w <<<"$victims")" -eq 2 ] || fail "not 2 ranks on each host"
  start=$(date +%s)
  # shellcheck disable=SC2086
  kill -KILL $victims
  for _ in $(seq 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  rc=0
  wait "$job" || rc=$?
  took=$(( $(date +%s) - start ))
  echo "host 2's ranks ($victims) killed: moco.sh ended after ${took}s with exit $rc"
  [ "$rc" -ne 0 ] || fail "moco.sh exited 0"
  [ "$took" -le 25 ] || fail "moco.sh took ${took}s (dist.timeout_s=10, MOCO_MPIRUN_GRACE_S=5)"
  # Host 1's ranks see the sockets of the killed ranks close ("peer hung up"): Open MPI's TCP BTL ends
  # them at once, before a collective times out, so the names come from mpirun (the first rank it saw die).
  named=$(grep -Eo "process rank [0-9]+ with PID [0-9]+ on node [a-z0-9]+ exited on signal 9" "$work/console" | head -n 1)
  [[ $named =~ ^process\ rank\ [23]\ with\ PID\ ([0-9]+)\ on\ node\ mocohost2\  ]] && [[ " $victims " == *" ${BASH_REMATCH[1]} "* ]] \
    || fail "mpirun does not name a killed rank of mocohost2: '$named'"
  echo "mpirun: $named"
  check_nothing_left "host 2's ranks were killed"
  "$build/moco_ckpt" verify "$run" >"$work/verify" 2>&1 || fail "the last checkpoint does not verify: $(cat "$work/verify")"
  last=$(( 10#$(sed 's/^step_//' "$run/checkpoints/latest") ))
  echo "the last checkpoint (step $last) verifies"
  resume_and_finish "$last"
  ;;
bad_link)
  # The same 8 steps on a clean link, then with host 2's link at 100 Mbit/s losing 1% of its packets
  # each way: TCP resends what was lost, so the losses are the same, bit for bit.
  clean=$work/clean bad=$work/bad
  launch --hostfile "$work/hostfile" "${short[@]}" train.output_dir="$clean" train.stop_at_step=8 >"$work/console" 2>&1 \
    || fail "the run on a clean link failed"
  "$hosts" shape 2 100mbit 1
  start=$(date +%s)
  launch --hostfile "$work/hostfile" "${short[@]}" train.output_dir="$bad" train.stop_at_step=8 >"$work/console" 2>&1 \
    || fail "the run on the bad link failed"
  took=$(( $(date +%s) - start ))
  dropped=$("$hosts" drops 2)
  echo "the run on the bad link took ${took}s; its loss rules dropped $dropped packets"
  [ "$dropped" -gt 0 ] || fail "no packet was dropped"
  check_nothing_left "the run on the bad link"
  [ "$(losses "$bad/metrics.jsonl" | wc -w)" -eq 8 ] || fail "not 8 train rows: $(losses "$bad/metrics.jsonl")"
  [ "$(losses "$bad/metrics.jsonl")" = "$(losses "$clean/metrics.jsonl")" ] \
    || fail "the losses differ: bad link $(losses "$bad/metrics.jsonl"), clean link $(losses "$clean/metrics.jsonl")"
  echo "losses of steps 1..8 equal on the bad and the clean link: $(losses "$bad/metrics.jsonl")"
  "$build/moco_ckpt" verify "$bad" >"$work/verify" 2>&1 || fail "moco_ckpt verify: $(cat "$work/verify")"
  ;;
link_down_in_checkpoint)
  # Rank 2 (host 2) is held 5 s half-way through its shard of step 10's checkpoint
  # (MOCO_CKPT_FAULT=pause_in_shard:2@10); the link goes down meanwhile. The files stay reachable (the
  # namespaces share one file system), so rank 2 finishes its shard, but the commit needs every rank.
  run=$work/run
  cmd=(--hostfile "$work/hostfile" "${args[@]}" train.output_dir="$run" train.epochs=4 ckpt.every_steps=5 dist.timeout_s=10)
  MOCO_CKPT_FAULT=pause_in_shard:2@10 MOCO_MPIRUN_GRACE_S=5 MOCO_MPIRUN_ARGS="$MOCO_MPIRUN_ARGS -x MOCO_CKPT_FAULT" \
    launch "${cmd[@]}" >"$work/console" 2>&1 &
  job=$!
  for _ in $(seq 600); do grep -qs "MOCO_CKPT_FAULT: pausing rank 2" "$work/console" && break; kill -0 "$job" || break; sleep 0.2; done
  grep -q "MOCO_CKPT_FAULT: pausing rank 2" "$work/console" || fail "rank 2 did not pause in its shard within 120 s"
  "$hosts" link 2 down
  start=$(date +%s)
  echo "host 2's link down while rank 2 writes its shard of step 10"
  for _ in $(seq 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  rc=0
  wait "$job" || rc=$?
  took=$(( $(date +%s) - start ))
  echo "moco.sh ended ${took}s after the link went down, exit $rc"
  [ "$rc" -ne 0 ] || fail "moco.sh exited 0"
  [ "$took" -le 35 ] || fail "moco.sh took ${took}s"
  grep -E "rank 0: .*did not complete within 10 s" "$run/rank0.log" | tail -n 1
  grep -Eq "rank 0: .*did not complete within 10 s.*ranks 2,3 did not answer a roll call \(dead or stuck\), on host mocohost2" \
    "$run/rank0.log" || fail "rank 0 does not name ranks 2,3 and mocohost2"
  for _ in $(seq 60); do [ -z "$(left_anywhere)" ] && break; sleep 0.5; done
  check_nothing_left "the link went down in a checkpoint"
  # Not committed: the step folder is left as .tmp, `latest` still names step 5, which verifies.
  [ -d "$run/checkpoints/step_00000010.tmp" ] || fail "no step_00000010.tmp: $(ls "$run/checkpoints")"
  [ ! -e "$run/checkpoints/step_00000010" ] || fail "step_00000010 was committed"
  [ "$(cat "$run/checkpoints/latest")" = step_00000005 ] || fail "latest is '$(cat "$run/checkpoints/latest")', not step_00000005"
  "$build/moco_ckpt" verify "$run" >"$work/verify" 2>&1 || fail "the last checkpoint does not verify: $(cat "$work/verify")"
  echo "step 10 left uncommitted (step_00000010.tmp); latest = step_00000005, which verifies"
  "$hosts" link 2 up
  resume_and_finish 5
  ;;
slurm_2nodes)
  # slurmctld on host 1 and a slurmd on each host (tests/lib/slurm_cluster.sh --hosts 2); the batch
  # script across both nodes, preempted with SIGUSR1 at step 20: checkpoint, requeue, resume, finish.
  slurm=$work/slurm run=$work/run
  extra_cleanup="$src/tests/lib/slurm_cluster.sh down $slurm"
  "$src/tests/lib/slurm_cluster.sh" up "$slurm" --hosts 2 --cpus 2 >"$work/slurm_up.log" 2>&1 || {
    cat "$work/slurm_up.log" >&2; fail "slurm_cluster.sh up"; }
  export SLURM_CONF=$slurm/slurm.conf OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=$net
  job=$(cd "$work" && on 1 sbatch --parsable -N2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --output="$work/job.out" \
        "$src/launch/slurm/moco.sbatch" "${args[@]}" train.output_dir="$run" train.epochs=6) || fail "sbatch"
  echo "job $job"
  state() { on 1 scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
  step_logged() { grep -o '"step":[0-9]*' "$run/metrics.jsonl" 2>/dev/null | tr -dc '0-9\n' | sort -n | tail -n 1; }
  for _ in $(seq 600); do
    [ "$(step_logged || echo 0)" -ge 20 ] 2>/dev/null && break
    case $(state) in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) cp "$work/job.out" "$work/console"; fail "the job ended before step 20: $(state)" ;; esac
    sleep 0.2
  done
  [ "$(step_logged)" -ge 20 ] || { cp "$work/job.out" "$work/console" 2>/dev/null; fail "no step 20 within 120 s ($(state))"; }
  for r in 0 1 2 3; do
    h=$(( r / 2 + 1 )) l=$(( r % 2 ))
    grep -q "rank $r/4 on host mocohost$h, local rank $l/2, device cpu" "$run/rank$r.log" \
      || fail "rank $r is not logged as local rank $l on mocohost$h: $(grep -h ' on host ' "$run/rank$r.log")"
  done
  on 1 scancel --batch --signal=USR1 "$job"
  echo "SIGUSR1 sent at step $(step_logged)"
  for _ in $(seq 600); do
    s=$(state)
    [ "$s" = COMPLETED ] && on 1 scontrol show job "$job" | grep -q 'Restarts=1' && break
    case $s in FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) cp "$work/job.out" "$work/console"; fail "job state $s" ;; esac
    sleep 0.2
  done
  cp "$work/job.out" "$work/console"
  [ "$(state)" = COMPLETED ] || fail "the job did not complete within 120 s of the signal (state $(state))"
  on 1 scontrol show job "$job" >"$work/job.info"
  grep -o '\bRestarts=[0-9]*\|\bNodeList=[^ ]*' "$work/job.info" | xargs echo "scontrol show job $job:"
  grep -q '\bRestarts=1\b' "$work/job.info" || fail "the job did not restart once"
  grep -q '\bNodeList=mocohost\[1-2\]' "$work/job.info" || fail "the job did not run on mocohost1 and mocohost2"
  grep -q "restart 1:" "$work/job.out" || fail "no restart 1 in the job's output"
  python3 - "$run/metrics.jsonl" <<'PY' || fail "metrics.jsonl does not log every step once"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r["step"] for r in rows if r["event"] == "train"]
assert steps == list(range(1, 97)), f"train rows: {steps[:5]}...{steps[-5:]} ({len(steps)} rows)"
pre = [r for r in rows if r["event"] == "preempted"]
res = [r for r in rows if r["event"] == "resume"]
assert len(pre) == 1 and pre[0]["signal"] == "SIGUSR1" and len(res) == 1 and res[0]["step"] == pre[0]["step"], (pre, res)
assert rows[-1]["event"] == "knn" and rows[-1]["encoder"] == "trained", rows[-1]
print(f"steps 1..96 each logged once; preempted after step {pre[0]['step']}, resumed from it; finished")
PY
  ;;
elastic_link_down | elastic_link_down_head_node)
  [ "$case_name" = elastic_link_down ] || launcher=3
  run=$work/run
  MOCO_MPIRUN_GRACE_S=5 MOCO_MPIRUN_PROBE_S=5 launch --max-restarts 2 --hostfile "$work/hostfile" "${elastic[@]}" \
    train.output_dir="$run" >"$work/console" 2>&1 &
  job=$!
  # Down a step after the checkpoint of step 8: the steps after it are logged, then logged again.
  wait_step 9 "$run" "$job"
  "$hosts" link 2 down
  start=$(date +%s)
  failed=-1 noticed=-1 resumed=-1
  for _ in $(seq 240); do  # 120 s
    now=$(( $(date +%s) - start ))
    [ "$failed" -ge 0 ] || ! grep -q '^\[moco.sh\] probing' "$work/console" || failed=$now
    if [ "$noticed" -lt 0 ] && grep -q '^\[moco.sh\] restart 1 of 2' "$work/console"; then
      noticed=$now latest=$(cat "$run/checkpoints/latest")  # before the restarted ranks commit one
    fi
    [ "$resumed" -ge 0 ] || ! trained_again || resumed=$now
    [ "$resumed" -lt 0 ] || break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.5
  done
  echo "link down: moco.sh saw the job fail ${failed}s after, restarted it ${noticed}s after, its ranks trained again ${resumed}s after"
  [ "$noticed" -ge 0 ] && [ "$noticed" -le 40 ] || fail "no restart within 40 s (dist.timeout_s=10, grace 5, probe 5)"
  [ "$resumed" -ge 0 ] && [ "$resumed" -le 60 ] || fail "no training within 60 s"
  [ "$(ranks_on 1 | wc -l)" -eq 2 ] && [ -z "$(ranks_on 2)" ] || fail "not 2 ranks on host 1 and none on host 2 after the restart"
  rc=0
  wait "$job" || rc=$?
  [ "$rc" -eq 0 ] || fail "moco.sh exited $rc"
  grep -q "kNN top-1: .*random init" "$work/console" || fail "the run did not finish"
  grep '^\[moco.sh\] \(probing\|restart\)' "$work/console"
  check_nothing_left "the run went on without host 2 and finished"
  python3 "$src/tests/multinode/restart_log.py" "$run/metrics.jsonl" 64 1 || fail "metrics.jsonl across the restart"
  [ "$(restart_field hosts_dropped)" = '["mocohost2"]' ] && [ "$(restart_field hosts)" = '["mocohost1"]' ] &&
    [ "$(restart_field old_world)" = 4 ] && [ "$(restart_field new_world)" = 2 ] || fail "restart row: $(restart_rows "$run")"
  [ "$(printf 'step_%08d' "$(restart_field step)")" = "$latest" ] || fail "restarted from step $(restart_field step), not $latest, the newest checkpoint"
  for r in 0 1; do
    grep -q "rank $r/2 on host mocohost1, local rank $r/2" "$run/rank$r.log" || fail "rank $r did not run again on mocohost1"
  done
  echo "the job went on without host 2 and finished"
  if [ "$case_name" = elastic_link_down ]; then
    # The same checkpoint resumed by hand on the same 2 ranks of host 1: the same steps, bit for bit.
    step=$(restart_field step)
    printf 'mocohost1 slots=2\n' >"$work/hostfile1"
    launch --hostfile "$work/hostfile1" "${elastic[@]}" train.output_dir="$work/by_hand" \
      train.resume="$run/checkpoints/$(printf 'step_%08d' "$step")" >"$work/console" 2>&1 || fail "the resume by hand failed"
    sed -n '/"event":"restart"/,$p' "$run/metrics.jsonl" >"$work/after_restart.jsonl"
    [ "$(losses "$work/after_restart.jsonl" | wc -w)" -eq $((64 - step)) ] || fail "not $((64 - step)) steps after the restart"
    [ "$(losses "$work/after_restart.jsonl")" = "$(losses "$work/by_hand/metrics.jsonl")" ] ||
      fail "the losses after the restart differ from those resumed by hand: $(losses "$work/after_restart.jsonl") vs $(losses "$work/by_hand/metrics.jsonl")"
    "$build/moco_ckpt" diff "$run" "$work/by_hand" --ignore '^progress/train_seconds$' >"$work/diff" 2>&1 ||
      fail "the final checkpoints differ: $(tail -n 5 "$work/diff")"
    echo "steps $((step + 1))..64 after the restart equal those resumed by hand from step $step on host 1's 2 ranks (losses bitwise, moco_ckpt diff: $(tail -n 1 "$work/diff"))"
  fi
  ;;
elastic_min_ranks)
  printf 'mocohost1 slots=3\nmocohost2 slots=1\n' >"$work/hostfile"
  run=$work/run
  MOCO_MPIRUN_GRACE_S=5 MOCO_MPIRUN_PROBE_S=5 launch --max-restarts 1 --min-ranks 3 --hostfile "$work/hostfile" \
    "${elastic[@]}" train.output_dir="$run" >"$work/console" 2>&1 &
  job=$!
  wait_step 9 "$run" "$job"
  "$hosts" link 2 down
  for _ in $(seq 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  rc=0
  wait "$job" || rc=$?
  [ "$rc" -eq 1 ] || fail "moco.sh exited $rc, not 1"
  why=$(grep '^\[moco.sh\] the job failed' "$work/console") || fail "moco.sh does not say why it stopped"
  echo "$why"
  [[ $why == *"mocohost2 did not answer, mocohost1 did: 3 rank(s) left, and the largest world of at most 3 that divides optim.batch_size 32 and moco.bn_splits 4 is 2, fewer than --min-ranks 3"* ]] ||
    fail "not the reason expected"
  [ -z "$(restart_rows "$run")" ] || fail "a restart was logged: $(restart_rows "$run")"
  for _ in $(seq 60); do [ -z "$(left_anywhere)" ] && break; sleep 0.5; done
  check_nothing_left "moco.sh stopped"
  "$build/moco_ckpt" verify "$run" >"$work/verify" 2>&1 || fail "the last checkpoint does not verify: $(cat "$work/verify")"
  ;;
elastic_link_flap)
  run=$work/run
  MOCO_MPIRUN_GRACE_S=5 MOCO_MPIRUN_PROBE_S=5 launch --max-restarts 1 --hostfile "$work/hostfile" "${elastic[@]}" \
    train.output_dir="$run" >"$work/console" 2>&1 &
  job=$!
  wait_step 9 "$run" "$job"
  "$hosts" link 2 down
  echo "host 2's link down at $(date '+%T.%N' | cut -c1-12), after step $(grep -o '"step":[0-9]*' "$run/metrics.jsonl" | tail -n 1 | tr -dc 0-9)"
  sleep 3
  "$hosts" link 2 up
  rc=0
  wait "$job" || rc=$?
  [ "$rc" -eq 0 ] || fail "moco.sh exited $rc"
  ! grep -q '^\[moco.sh\] \(probing\|restart\)' "$work/console" && [ -z "$(restart_rows "$run")" ] || fail "a restart after a 3 s flap"
  python3 "$src/tests/multinode/restart_log.py" "$run/metrics.jsonl" 64 0 || fail "metrics.jsonl"
  check_nothing_left "the run finished"
  # How long the steps took, by the wall clock of rank 0's step lines.
  python3 - "$work/console" <<'PY' || fail "no step waited for the link"
import datetime, re, sys
t = [datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
     for m in re.finditer(r"^\[([0-9-]+ [0-9:.]+)\] \[info\] \[rank 0\] epoch [0-9.]+ step \d+/64 ", open(sys.argv[1]).read(), re.M)]
gaps = sorted(b - a for a, b in zip(t, t[1:]))
print(f"host 2's link down 3 s: no restart; the longest step took {gaps[-1]:.1f} s (the median {gaps[len(gaps) // 2]:.2f} s)")
sys.exit(0 if gaps[-1] >= 2 else 1)  # else the link was not down while the ranks talked
PY
  ;;
elastic_lost_twice)
  run=$work/run
  MOCO_MPIRUN_GRACE_S=5 MOCO_MPIRUN_PROBE_S=10 launch --max-restarts 1 --hostfile "$work/hostfile" "${elastic[@]}" \
    train.output_dir="$run" >"$work/console" 2>&1 &
  job=$!
  wait_step 12 "$run" "$job"
  "$hosts" link 2 down
  start=$(date +%s)
  # Back while moco.sh probes the hosts: host 2 answers and stays in the job.
  wait_console '^\[moco.sh\] probing 2 host' 60
  "$hosts" link 2 up
  failed=$(( $(date +%s) - start ))
  wait_console '^\[moco.sh\] restart 1 of 1 after exit 1: no host dropped; 4 rank(s) on mocohost1 mocohost2 (were 4)' 30
  for _ in $(seq 300); do trained_again && break; kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
  trained_again || fail "the restarted job did not train"
  [ "$(ranks_on 1 | wc -l)" -eq 2 ] && [ "$(ranks_on 2 | wc -l)" -eq 2 ] || fail "not 2 ranks on each host after the restart"
  echo "host 2's link down for ${failed}s, back while moco.sh probed: the job restarted on both hosts, 4 ranks, trained again $(( $(date +%s) - start ))s after the link went down"
  "$hosts" link 2 down
  start=$(date +%s)
  for _ in $(seq 120); do kill -0 "$job" 2>/dev/null || break; sleep 0.5; done
  rc=0
  wait "$job" || rc=$?
  echo "host 2 lost again: moco.sh exited $rc after $(( $(date +%s) - start ))s"
  [ "$rc" -eq 1 ] || fail "moco.sh exited $rc, not 1"
  grep '^\[moco.sh\] the job failed (exit 1) and no restart is left (1 of 1 used): stopping' "$work/console" ||
    fail "moco.sh does not say that no restart is left"
  [ "$(restart_rows "$run" | wc -l)" -eq 1 ] || fail "not one restart row: $(restart_rows "$run")"
  [ "$(restart_field hosts_dropped)" = '[]' ] && [ "$(restart_field new_world)" = 4 ] || fail "restart row: $(restart_rows "$run")"
  for _ in $(seq 60); do [ -z "$(left_anywhere)" ] && break; sleep 0.5; done
  check_nothing_left "moco.sh stopped"
  "$build/moco_ckpt" verify "$run" >"$work/verify" 2>&1 || fail "the last checkpoint does not verify: $(cat "$work/verify")"
  ;;
slurm_node_killed)
  # slurmctld on host 1, a slurmd on each of 3 hosts; a node not heard from for 20 s is DOWN.
  slurm=$work/slurm run=$work/run
  extra_cleanup="$src/tests/lib/slurm_cluster.sh down $slurm"
  "$src/tests/lib/slurm_cluster.sh" up "$slurm" --hosts 3 --cpus 2 --slurmd-timeout 20 >"$work/slurm_up.log" 2>&1 || {
    cat "$work/slurm_up.log" >&2; fail "slurm_cluster.sh up"; }
  export SLURM_CONF=$slurm/slurm.conf OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=$net MOCO_SBATCH_PROBE_S=10
  job=$(cd "$work" && on 1 sbatch --parsable -N2 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --output="$work/job.out" \
        "$src/launch/slurm/moco.sbatch" --max-restarts 1 "${elastic[@]}" train.output_dir="$run") || fail "sbatch"
  state() { on 1 scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
  nodes() { on 1 scontrol show job "$job" 2>/dev/null | grep -o '\bNodeList=[^ ]*' | cut -d= -f2; }
  for _ in $(seq 600); do grep -q '"step":12\b' "$run/metrics.jsonl" 2>/dev/null && break; sleep 0.2; done
  grep -q '"step":12\b' "$run/metrics.jsonl" || { cp "$work/job.out" "$work/console" 2>/dev/null; fail "no step 12 within 120 s ($(state))"; }
  [ "$(nodes)" = "mocohost[1-2]" ] || fail "job $job runs on $(nodes), not mocohost[1-2]"
  "$hosts" kill 2
  start=$(date +%s)
  echo "job $job: node mocohost2 killed at $(date '+%F %T'), after step $(grep -o '"step":[0-9]*' "$run/metrics.jsonl" | tail -n 1 | tr -dc 0-9)"
  requeued=-1
  for _ in $(seq 900); do  # 180 s
    s=$(state)
    [ "$requeued" -ge 0 ] || ! on 1 scontrol show job "$job" | grep -q 'Restarts=1' || requeued=$(( $(date +%s) - start ))
    [ "$s" = COMPLETED ] && break
    case $s in FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY) break ;; esac
    sleep 0.2
  done
  cp "$work/job.out" "$work/console"
  on 1 scontrol show job "$job" >"$work/job.info"
  grep -o '\bJobState=[A-Z_]*\|\bRestarts=[0-9]*\|\bNodeList=[^ ]*' "$work/job.info" | xargs echo "scontrol show job $job:"
  echo "requeued ${requeued}s after the kill, completed $(( $(date +%s) - start ))s after it"
  grep '\[moco.sbatch .*\] \(the step failed\|.* did not answer\|waiting\|requeue\|job [0-9]* restart 1\)' "$work/job.out" | cut -c1-160 || true
  grep -h -m 1 'resumed from' "$run/rank0.log" | cut -c1-100 || true
  grep -h 'step 9/64' "$run/rank0.log" | tail -n 1 | cut -c1-60 || true
  [ "$(state)" = COMPLETED ] || fail "the job did not complete (state $(state))"
  grep -q '\bRestarts=1\b' "$work/job.info" || fail "the job did not restart once"
  grep -q '\bNodeList=mocohost\[1,3\]' "$work/job.info" || fail "the job did not run again on mocohost1 and mocohost3"
  grep -q 'mocohost2 did not answer: restart 1 of 1' "$work/job.out" || fail "moco.sbatch did not find mocohost2 dead"
  python3 "$src/tests/multinode/restart_log.py" "$run/metrics.jsonl" 64 1 || fail "metrics.jsonl across the restart"
  [ "$(restart_field hosts_dropped)" = '["mocohost2"]' ] || fail "restart row: $(restart_rows "$run")"
  grep -q "rank 2/4 on host mocohost3" "$run/rank2.log" || fail "rank 2 did not run again on mocohost3"
  ;;
*) fail "unknown case" ;;
esac
echo "PASS ($case_name)"
