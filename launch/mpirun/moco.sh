#!/bin/bash
# moco_dist under Open MPI's mpirun, without a scheduler.
#
#   launch/mpirun/moco.sh [-n RANKS] [--hostfile FILE] [--max-restarts N] [--min-ranks M] CONFIG [key=value ...]
#
# One node: RANKS defaults to the GPUs nvidia-smi lists (one rank per GPU), else 1 (give -n for CPU
# ranks; each then gets OMP_NUM_THREADS=cores/RANKS and train.threads to match, unless set).
# Several nodes: --hostfile FILE, lines "host slots=G" (G = GPUs of that host); RANKS defaults to
# the sum of the slots. The binary is $MOCO_DIST, else moco_dist on PATH, else build/moco_dist
# beside this repository's launch/. Runs with train.resume=auto unless the command line gives
# train.resume=... (moco_dist refuses a key given twice).
#
# Stopping with a checkpoint: `kill -USR1 <moco.sh pid>` (passed to mpirun, which forwards it to every rank; they
# finish their step, commit a checkpoint and exit 0); the same command resumes. SIGTERM, SIGINT or
# SIGHUP to moco.sh do the same and it exits 0 too: the script sends that signal to the ranks on
# this host itself (mpirun would tear the job down and exit 1), and the ranks agree to stop after
# the same step; with no rank on this host it sends SIGUSR1 to mpirun. The same for Ctrl-C in the
# terminal, closing it, or a signal to the script's process group: mpirun runs in its own session.
# A second such signal ends the job at once (the ranks die, mpirun and the script exit non-zero).
#
# MOCO_MPIRUN_ARGS: more mpirun options, split at spaces, e.g. across hosts
#   MOCO_MPIRUN_ARGS="--mca btl_tcp_if_include 10.0.0.0/24 --mca oob_tcp_if_include 10.0.0.0/24"
# A lost host: once the ranks on this host have ended (or, on a host that runs none, a daemon on
# another host has: its launch agent, ssh, ended) and mpirun is still running MOCO_MPIRUN_GRACE_S
# seconds later (default 20), mpirun is waiting for a daemon it cannot reach; it is killed (SIGKILL:
# it is stuck in its abort) with what is left in its session (the ssh to the lost host), and the
# script exits 1. With --hostfile the daemons on the other hosts run under
# launch/mpirun/orted_watchdog.sh (the same path on every host), which ends a daemon left behind
# the same way: its ranks ended, GRACE seconds passed, mpirun never came.
#
# --max-restarts N (default 0: the job ends as above): after a failure that is not a clean stop (a
# host lost, ranks that died or exited non-zero; not a stop on USR1, TERM, INT or HUP, nor exit 2, a
# refusal) the job starts again by itself, at most N times. Each time every host of the hostfile is
# probed with mpirun's launch agent (plm_rsh_agent in MOCO_MPIRUN_ARGS or OMPI_MCA_plm_rsh_agent, else
# ssh): `AGENT HOST true`, within MOCO_MPIRUN_PROBE_S seconds (default 15). Those that do not answer
# are dropped, and the run resumes from its newest checkpoint that `moco_ckpt verify` passes, on the
# hosts left: as many ranks as their slots hold, never more than before, the largest such world that
# divides optim.batch_size (and moco.bn_splits, where the world did). The global batch, and with it
# the data order and the lr and momentum schedules, stay the run's: each rank takes a larger share.
# Fewer ranks than --min-ranks M (default 1): it stops, exit 1, saying why. Each restart is a line
# here and a {"event":"restart"} row in metrics.jsonl (hosts dropped, old and new world, the step
# resumed from). With --hostfile every host line needs slots=N.
set -euo pipefail
here=$(dirname "$0")
here=$(cd "$here/../.." && pwd)
ranks= hostfile= config= max_restarts=0 min_ranks=1
max_ranks=16777216  # 2^24: more ranks than any machine runs, far below mpirun's int
while [ $# -gt 0 ]; do
  case $1 in
    -n | -np)
      # A count of ranks, refused before anything starts: 0 or a word would reach mpirun (and a
      # division by the rank count below).
      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [[ $2 =~ [1-9] ]] ||
        { echo "moco.sh: $1 '${2-}': expects the number of ranks, a whole number above 0" >&2; exit 2; }
      # Compared as digits before any arithmetic: bash's wraps past 2^63 (99999999999999999999 made
      # -np 7766279631452241919, 18446744073709551617 made -np 1).
      [[ $2 =~ ^0*([1-9][0-9]{0,7})$ ]] && [ "${BASH_REMATCH[1]}" -le "$max_ranks" ] ||
        { echo "moco.sh: $1 '$2': more ranks than any machine runs (at most $max_ranks)" >&2; exit 2; }
      ranks=$((10#${BASH_REMATCH[1]})); shift 2 ;;
    --hostfile) [ $# -ge 2 ] || { echo "moco.sh: --hostfile: expects a file" >&2; exit 2; }
      hostfile=$2; shift 2 ;;
    --max-restarts | --min-ranks)
      # A count refused before anything starts, as -n's: a word would fail only at the first restart.
      least=0
      [ "$1" = --min-ranks ] && least=1
      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]{1,6}$ ]] && [ "$((10#$2))" -ge "$least" ] ||
        { echo "moco.sh: $1 '${2-}': expects a whole number, at least $least (at most 6 digits)" >&2; exit 2; }
      if [ "$1" = --max-restarts ]; then max_restarts=$((10#$2)); else min_ranks=$((10#$2)); fi
      shift 2 ;;
    # moco_dist's own spelling of the config, taken as it is meant.
    -c | --config) [ $# -ge 2 ] || { echo "moco.sh: $1: expects the config file" >&2; exit 2; }
      config=$2; shift 2 ;;
    -h | --help) sed -n '2,42p' "$0"; exit 0 ;;
    # An option this script does not know would be taken for the CONFIG, after mpirun started.
    -*) echo "moco.sh: unknown option '$1' (options: -n RANKS, --hostfile FILE, --max-restarts N, --min-ranks M; then CONFIG and key=value overrides)" >&2
      exit 2 ;;
    *) break ;;
  esac
done
if [ -z "$config" ]; then
  [ $# -ge 1 ] || { echo "usage: launch/mpirun/moco.sh [-n RANKS] [--hostfile FILE] [--max-restarts N] [--min-ranks M] CONFIG [key=value ...]" >&2; exit 2; }
  config=$1
  shift
fi
# A hostfile mpirun cannot use fails inside mpirun ("An internal error has occurred in ORTE", "No
# nodes are available") without naming the file: checked here, before anything starts.
if [ -n "$hostfile" ]; then
  [ -f "$hostfile" ] && [ -r "$hostfile" ] || { echo "moco.sh: --hostfile '$hostfile': no such readable file" >&2; exit 2; }
  grep -qvE '^[[:space:]]*(#|$)' "$hostfile" || { echo "moco.sh: --hostfile '$hostfile': names no host" >&2; exit 2; }
fi
# given KEY ARGS...: whether the overrides set KEY (moco_dist refuses a key given twice, so the
# script's own defaults step aside).
given() { local key=$1 arg; shift; for arg in "$@"; do [[ $arg == "$key="* ]] && return 0; done; return 1; }

binary=${MOCO_DIST:-}
[ -n "$binary" ] || binary=$(command -v moco_dist || echo "$here/build/moco_dist")
[ -x "$binary" ] || { echo "moco.sh: no moco_dist binary ($binary): set MOCO_DIST or build it" >&2; exit 2; }

grace=${MOCO_MPIRUN_GRACE_S:-20}
mpi_head=(mpirun --bind-to none)
uid=$(id -u)
[ "$uid" -ne 0 ] || mpi_head+=(--allow-run-as-root)
extra=()
given train.resume "$@" || extra+=(train.resume=auto)
if [ -n "$hostfile" ]; then
  [ -n "$ranks" ] || ranks=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^slots=/) {sub("slots=", "", $i); n += $i}} END {print n + 0}' "$hostfile")
  [ "$ranks" -gt 0 ] || { echo "moco.sh: --hostfile '$hostfile': no host gives slots=N: give -n RANKS" >&2; exit 2; }
else
  if [ -z "$ranks" ]; then
    ranks=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "$ranks" -gt 0 ] || ranks=1
  fi
  cores=$(nproc)
  if ! nvidia-smi -L >/dev/null 2>&1; then
    # CPU ranks share the cores; more ranks than cores need --oversubscribe.
    threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
    given train.threads "$@" || extra+=(train.threads="$OMP_NUM_THREADS")
    [ "$ranks" -le "$cores" ] || mpi_head+=(--oversubscribe)
  fi
fi
mpi_tail=(-x OMP_NUM_THREADS)
# NCCL's settings (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG, ...) reach the ranks on every host:
# mpirun passes only what -x names to other hosts.
while IFS= read -r var; do mpi_tail+=(-x "$var"); done < <(compgen -e | grep '^NCCL_' || true)
# shellcheck disable=SC2206  # split at spaces on purpose
[ -z "${MOCO_MPIRUN_ARGS:-}" ] || mpi_tail+=($MOCO_MPIRUN_ARGS)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# mpirun's command line for WORLD ranks on the hosts of HOSTFILE (none: this machine).
mpirun_command() {
  mpi=("${mpi_head[@]}")
  # Every daemon under orted_watchdog.sh: a host cut off from mpirun does not keep its daemon.
  [ -z "$2" ] || mpi+=(--hostfile "$2" --map-by slot --mca orte_launch_agent "$here/launch/mpirun/orted_watchdog.sh $grace orted")
  mpi+=(-np "$1" "${mpi_tail[@]}")
}
if [ "$max_restarts" -gt 0 ] || [ "$min_ranks" -gt 1 ]; then
  # shellcheck source=launch/mpirun/elastic.sh
  . "$here/launch/mpirun/elastic.sh"
  elastic_setup "$@"
fi

# mpirun runs as a child: SIGUSR1 to this script reaches it (it forwards it to the ranks), and the
# script can end it when it waits for a host it lost. It runs in a session of its own (setsid): a
# terminal's Ctrl-C or hang-up, or a signal to this script's process group, reaches only this
# script, which stops the ranks with a checkpoint; mpirun would tear the job down (exit 1).
# (Without job control this child leads no process group, so setsid starts mpirun in place and $!
# is mpirun's pid.)
mpirun_pid= stop_signal=
# The stop a signal to this script asked for (USR1, TERM, INT, HUP): such a job is never restarted.
stop_asked=
# The ranks mpirun started on this host (its children running the binary).
local_rank_pids() { pgrep -P "$mpirun_pid" -f "^$binary " 2>/dev/null || true; }
local_ranks() { local_rank_pids | wc -l; }
# SIG: the first stops the ranks after their step with a checkpoint; a second ends them at once.
stop_ranks() {
  [ -n "$mpirun_pid" ] || return 0
  local pids
  pids=$(local_rank_pids)
  if [ -n "$stop_signal" ]; then
    echo "[moco.sh] second signal ($1): ending the job now" >&2 || true
    # shellcheck disable=SC2086  # one pid a word
    [ -z "$pids" ] || kill -"$1" $pids 2>/dev/null || true
    kill -TERM "$mpirun_pid" 2>/dev/null || true
    return 0
  fi
  stop_signal=$1
  # A hung-up terminal fails this write: the stop goes on all the same.
  echo "[moco.sh] SIG$1: the ranks stop after their step with a checkpoint (a second signal ends them at once)" >&2 || true
  # shellcheck disable=SC2086
  if [ -n "$pids" ]; then kill -"$1" $pids 2>/dev/null || true; else kill -USR1 "$mpirun_pid" 2>/dev/null || true; fi
}
trap 'stop_asked=${stop_asked:-USR1}; [ -z "$mpirun_pid" ] || kill -USR1 "$mpirun_pid" 2>/dev/null || true' USR1
trap 'stop_asked=${stop_asked:-TERM}; stop_ranks TERM' TERM
trap 'stop_asked=${stop_asked:-INT}; stop_ranks INT' INT
trap 'stop_asked=${stop_asked:-HUP}; stop_ranks HUP' HUP
own_session=()
command -v setsid >/dev/null && own_session=(setsid)

# The job is ending once a process mpirun started on this host has ended: all the ranks here, or the
# launch agent (ssh) of a daemon on another host (daemons end only when the job does). The second
# is what a launcher that runs no ranks (a head or login node) sees of a failing job.
agents=" " agent_ended=0
note_agents() {  # records mpirun's children that are not ranks; agent_ended=1 once one of them is gone
  local children ranks p
  children=$(pgrep -P "$mpirun_pid" 2>/dev/null | xargs || true)
  ranks=$(local_rank_pids | xargs || true)
  children=" $children " ranks=" $ranks "
  for p in $agents; do
    if [[ $ranks == *" $p "* ]]; then agents=${agents/ $p / }  # a rank seen before it ran the binary
    elif [[ $children != *" $p "* ]]; then agent_ended=1; fi
  done
  for p in $children; do [[ $ranks == *" $p "* || $agents == *" $p "* ]] || agents+="$p "; done
}
# mpirun (mpi) running ARGS... until it ends, or, once it waits for a host it cannot reach, until it
# is killed; its exit status (1 when killed).
run_job() {
  "${own_session[@]}" "${mpi[@]}" "$binary" "$@" &
  mpirun_pid=$!
  agents=" " agent_ended=0
  local seen=0 gone=0 what rc=0 here_now
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    note_agents
    here_now=$(local_ranks)
    if [ "$here_now" -gt 0 ]; then
      seen=1 gone=0
    elif [ "$seen" -eq 1 ] || [ "$agent_ended" -eq 1 ]; then
      gone=$((gone + 1))
      if [ "$gone" -gt "$grace" ]; then
        what="the ranks on this host ended"
        [ "$seen" -eq 1 ] || what="a daemon on another host ended"
        echo "[moco.sh] $what ${grace} s ago and mpirun still waits (for a host it cannot reach?): killing it" >&2
        # KILL: mpirun is already aborting (a second signal makes Open MPI 4.1's mpirun crash). Then
        # what is left in its session: the ssh to the host it lost would wait as long as mpirun.
        kill -KILL "$mpirun_pid" 2>/dev/null || true
        wait "$mpirun_pid" 2>/dev/null || true
        [ ${#own_session[@]} -eq 0 ] || pkill -KILL -s "$mpirun_pid" 2>/dev/null || true
        mpirun_pid=
        return 1
      fi
    fi
    sleep 1 &
    wait $! 2>/dev/null || true
  done
  wait "$mpirun_pid" || rc=$?
  mpirun_pid=
  return "$rc"
}

world=$ranks hosts_now=$hostfile job_args=(--config "$config" "${extra[@]}" "$@")
while :; do
  mpirun_command "$world" "$hosts_now"
  echo "[moco.sh] ${mpi[*]} $binary ${job_args[*]}"
  rc=0
  run_job "${job_args[@]}" || rc=$?
  [ "$rc" -ne 0 ] && [ "$max_restarts" -gt 0 ] || exit "$rc"
  # Sets world, hosts_now and job_args for the next start, or says why there is none.
  restart_plan "$rc" || exit "$rc"
done
