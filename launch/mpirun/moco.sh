#!/bin/bash
# moco_dist under Open MPI's mpirun, without a scheduler.
#
#   launch/mpirun/moco.sh [-n RANKS] [--hostfile FILE] CONFIG [key=value ...]
#
# One node: RANKS defaults to the GPUs nvidia-smi lists (one rank per GPU), else 1 (give -n for CPU
# ranks; each then gets OMP_NUM_THREADS=cores/RANKS and train.threads to match, unless set).
# Several nodes: --hostfile FILE, lines "host slots=G" (G = GPUs of that host); RANKS defaults to
# the sum of the slots. The binary is $MOCO_DIST, else moco_dist on PATH, else build/moco_dist
# beside this repository's launch/. Runs with train.resume=auto (after the config, so an explicit
# train.resume=... still wins).
#
# Stopping with a checkpoint: `kill -USR1 <mpirun pid>` (mpirun forwards SIGUSR1 to every rank; they
# finish their step, commit a checkpoint and exit 0); the same command resumes. SIGTERM to mpirun
# tears the job down (its ranks still try to checkpoint, but mpirun does not wait long for them).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
ranks= hostfile=
while [ $# -gt 0 ]; do
  case $1 in
    -n | -np) ranks=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: launch/mpirun/moco.sh [-n RANKS] [--hostfile FILE] CONFIG [key=value ...]" >&2; exit 2; }
config=$1
shift

binary=${MOCO_DIST:-$(command -v moco_dist || echo "$here/build/moco_dist")}
[ -x "$binary" ] || { echo "moco.sh: no moco_dist binary ($binary): set MOCO_DIST or build it" >&2; exit 2; }

mpi=(mpirun --bind-to none)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
extra=()
if [ -n "$hostfile" ]; then
  [ -n "$ranks" ] || ranks=$(awk '{for (i = 1; i <= NF; i++) if ($i ~ /^slots=/) {sub("slots=", "", $i); n += $i}} END {print n + 0}' "$hostfile")
  mpi+=(--hostfile "$hostfile" --map-by slot)
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
    extra+=(train.threads="$OMP_NUM_THREADS")
    [ "$ranks" -le "$cores" ] || mpi+=(--oversubscribe)
  fi
fi
mpi+=(-np "$ranks" -x OMP_NUM_THREADS)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
echo "[moco.sh] ${mpi[*]} $binary --config $config train.resume=auto ${extra[*]} $*"
exec "${mpi[@]}" "$binary" --config "$config" train.resume=auto "${extra[@]}" "$@"
