#!/usr/bin/env bash
# A throw-away Slurm cluster for the tests (Debian's slurm-wlm 22.05 and munge, installed by
# tools/install_deps.sh), run as root without systemd, everything under DIR:
#
#   slurm_cluster.sh up DIR [--cpus N] [--hosts N] [--slurmd-timeout S]
#       write DIR/slurm.conf, start munged, slurmctld and the slurmds, wait until every node is idle.
#       Default: one node, this machine (its hostname, 127.0.0.1). --hosts N: nodes mocohost1..N, the
#       test hosts of tests/multinode/hosts.sh (up, in $MOCO_HOSTS_DIR), slurmctld on host 1.
#       --cpus N: CPUs of each node (default: this machine's; more than it has is allowed).
#       --slurmd-timeout S: a node that has not answered slurmctld for S seconds is set DOWN, and the
#       jobs on it requeued (SlurmdTimeout; Slurm's default, 300 s, otherwise).
#   slurm_cluster.sh down DIR
#       cancel the jobs, then stop exactly the daemons `up` started (by the pids recorded in DIR/pids,
#       each checked to still be a process of DIR's cluster).
#
# Use it with SLURM_CONF=DIR/slurm.conf; with --hosts, Slurm's commands must run on a test host (the
# controller's address exists only there): hosts.sh exec 1 sbatch ...
set -euo pipefail
cmd=${1:-} dir=${2:-}
[ -n "$dir" ] || { sed -n '2,16p' "$0"; exit 2; }
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
hosts=$(cd "$(dirname "$0")/../multinode" && pwd)/hosts.sh
export SLURM_CONF=$dir/slurm.conf
log() { echo "slurm_cluster: $*" >&2; }

# Where the Slurm commands run: on test host 1 when the cluster lives on the test hosts (up writes
# DIR/hosts_dir then), else here.
ctl() {
  if [ -f "$dir/hosts_dir" ]; then MOCO_HOSTS_DIR=$(cat "$dir/hosts_dir") "$hosts" exec 1 "$@"; else "$@"; fi
}
# PID is alive and one of this cluster's daemons (every one is given a path under DIR on its command line).
ours() { [ -n "$1" ] && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -q -- "$dir/"; }
# start NAME CMD...: CMD in its own session (a test's shell ending does not take it down), its pid
# recorded. Every CMD execs its daemon (setsid, hosts.sh exec, unshare and sh's exec do not fork), so $!
# is the daemon's pid.
start() {
  local name=$1
  shift
  setsid "$@" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/pids/$name.pid"
}
wait_for() {  # SECONDS WHAT CMD...
  local n=$1 what=$2
  shift 2
  for _ in $(seq $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "timed out waiting for $what; logs in $dir/log"
  tail -n 20 "$dir"/log/* >&2 2>/dev/null || true
  exit 1
}

# Every node of the cluster (up sets want) is idle.
all_idle() { [ "$(ctl sinfo -h -N -o %T | grep -cx idle)" = "$want" ]; }

up() {
  local cpus nodes=0 i slurmd_timeout=300
  cpus=$(nproc)
  while [ $# -gt 0 ]; do
    case $1 in
    --cpus) cpus=$2; shift 2 ;;
    --hosts) nodes=$2; shift 2 ;;
    --slurmd-timeout) slurmd_timeout=$2; shift 2 ;;
    *) log "unknown option $1"; exit 2 ;;
    esac
  done
  for b in munged munge slurmctld slurmd sbatch sinfo; do
    command -v "$b" >/dev/null || { log "no $b: Slurm and munge are installed by tools/install_deps.sh"; exit 1; }
  done
  for f in "$dir"/pids/*.pid; do
    [ -e "$f" ] || continue
    if ours "$(cat "$f")"; then log "a cluster of $dir is running ($f): slurm_cluster.sh down $dir first"; exit 1; fi
  done
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/pids" "$dir/munge" "$dir"/tmp* "$dir/hosts_dir"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/pids" "$dir/munge/key" "$dir/tmp"

  # The nodes: NAME ADDRESS per line; the controller runs where the first one is.
  local nodelist
  if [ "$nodes" -eq 0 ]; then
    nodelist="$(hostname -s) 127.0.0.1"
  else
    local subnet
    subnet=$(cat "${MOCO_HOSTS_DIR:?--hosts needs the test hosts up in MOCO_HOSTS_DIR}/subnet")
    echo "$MOCO_HOSTS_DIR" >"$dir/hosts_dir"
    nodelist=$(for i in $(seq "$nodes"); do echo "mocohost$i $subnet.$i"; done)
  fi
  local ctld_name ctld_addr
  read -r ctld_name ctld_addr <<<"$nodelist"

  # munged wants its key 0400 and owned by its user, and a socket directory others may enter.
  chmod 755 "$dir" "$dir/munge"
  chmod 700 "$dir/munge/key"
  dd if=/dev/urandom of="$dir/munge/key/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/key/munge.key"
  local sock=$dir/munge/munge.socket

  {
    cat <<EOF
# written by tests/lib/slurm_cluster.sh
ClusterName=moco
SlurmctldHost=$ctld_name($ctld_addr)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# PMIx makes TmpFS/spmix_appdir_<uid>_<job>.<step> on every node: each test host sees its own (below).
TmpFS=$dir/tmp
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# The scheduler every 2 s, backfill every 1 s: nothing else wakes it when a requeued job becomes
# eligible (defaults 60 s and 30 s).
SchedulerParameters=sched_interval=2,bf_interval=1
# The nodes are what this file says (CPUs may exceed the machine's).
SlurmdParameters=config_overrides
MpiDefault=pmix
JobRequeue=1
ReturnToService=2
KillWait=5
SlurmdTimeout=$slurmd_timeout
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
EOF
    while read -r name addr; do echo "NodeName=$name NodeAddr=$addr CPUs=$cpus RealMemory=4000 State=UNKNOWN"; done <<<"$nodelist"
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
  } >"$SLURM_CONF"
  # Each slurmd's spool (SlurmdSpoolDir, %n = its node), made here: slurmd looks for it before it makes it.
  while read -r name _; do mkdir -p "$dir/spool/$name"; done <<<"$nodelist"

  # One munged, in this machine's namespaces: its socket is a file, which the test hosts reach too.
  start munged munged -F --socket="$sock" --key-file="$dir/munge/key/munge.key" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log"
  wait_for 15 munged sh -c "munge -S '$sock' -n | unmunge -S '$sock'"
  if [ "$nodes" -eq 0 ]; then
    start slurmctld slurmctld -D -f "$SLURM_CONF"
    wait_for 30 slurmctld scontrol ping
    start "slurmd.$ctld_name" slurmd -D -N "$ctld_name" -f "$SLURM_CONF"
  else
    start slurmctld "$hosts" exec 1 slurmctld -D -f "$SLURM_CONF"
    wait_for 30 slurmctld ctl scontrol ping
    # Each test host's slurmd sees its own TmpFS: a mount namespace binds DIR/tmp.HOST on DIR/tmp
    # (one directory shared by the nodes makes PMIx refuse the step).
    for i in $(seq "$nodes"); do
      mkdir -p "$dir/tmp.mocohost$i"
      start "slurmd.mocohost$i" "$hosts" exec "$i" unshare --mount --propagation private sh -c \
        "mount --bind '$dir/tmp.mocohost$i' '$dir/tmp' && exec slurmd -D -N mocohost$i -f '$SLURM_CONF'"
    done
  fi
  want=$((nodes > 0 ? nodes : 1))
  wait_for 60 "$want node(s) idle" all_idle
  ctl sinfo -N
}

down() {
  local jobs f p name
  if ours "$(cat "$dir/pids/slurmctld.pid" 2>/dev/null)"; then
    # Cancelled first, so that the slurmds end the jobs' processes (slurmstepd and the tasks).
    jobs=$(ctl squeue -h -o %i 2>/dev/null | xargs) || true
    if [ -n "$jobs" ]; then
      log "cancelling jobs $jobs"
      # shellcheck disable=SC2086
      ctl scancel $jobs 2>/dev/null || true
      for _ in $(seq 60); do [ -z "$(ctl squeue -h -t R,CG,S -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
  fi
  # The slurmds, then slurmctld, then munged: each TERM, KILL after 10 s.
  for f in "$dir"/pids/slurmd.*.pid "$dir/pids/slurmctld.pid" "$dir/pids/munged.pid"; do
    [ -e "$f" ] || continue
    p=$(cat "$f") name=$(basename "$f" .pid)
    if ours "$p"; then
      kill -TERM "$p"
      for _ in $(seq 50); do ours "$p" || break; sleep 0.2; done
      if ours "$p"; then log "$name ($p) ignored TERM: KILL"; kill -KILL "$p"; fi
      log "stopped $name (pid $p)"
    fi
    rm -f "$f"
  done
}

case $cmd in
up) shift 2; up "$@" ;;
down) down ;;
*) sed -n '2,16p' "$0"; exit 2 ;;
esac
