#!/usr/bin/env bash
# A 2-node Slurm on the test hosts of tests/multinode/hosts.sh (which must be up, MOCO_HOSTS_DIR):
# slurmctld on host 1, one slurmd per host, each node named by its host's name (mocohost1, mocohost2)
# with NodeAddr its 10.77.0.I address; one munged (its socket is a file, so every namespace reaches it).
# Built on ../shared/slurm/slurm_up.sh (Debian's slurm-wlm 22.05 and munge, installed with apt-get if
# missing, unless SLURM_UP_NO_INSTALL=1).
#
#   slurm_2nodes.sh up DIR      write DIR/slurm.conf and start the daemons; waits until both nodes are idle
#   slurm_2nodes.sh down DIR    cancel the jobs, stop the daemons (by their recorded pids)
#
# The Slurm commands must run on a test host (the controller's address exists only there):
#   SLURM_CONF=DIR/slurm.conf hosts.sh exec 1 sbatch ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hosts=$here/hosts.sh
cmd=$1 dir=$(mkdir -p "$2" && cd "$2" && pwd)
subnet=$(cat "${MOCO_HOSTS_DIR:?}/subnet")
export SLURM_CONF=$dir/slurm.conf
on() { local i=$1; shift; "$hosts" exec "$i" "$@"; }

wait_for() {  # SECONDS WHAT CMD...
  local n=$1 what=$2; shift 2
  for _ in $(seq $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "slurm_2nodes: timed out waiting for $what; logs in $dir/log" >&2
  tail -n 20 "$dir"/log/* >&2 2>/dev/null || true
  exit 1
}

up() {
  # Installed as ../shared/slurm/slurm_up.sh does (Debian's packages), unless SLURM_UP_NO_INSTALL=1.
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    [ "${SLURM_UP_NO_INSTALL:-0}" = 1 ] || { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null; } || true
  fi
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
    { echo "slurm_2nodes: no slurm-wlm/munge (../shared/slurm/slurm_up.sh installs them)" >&2; exit 1; }
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/munge" "$dir/pids"
  mkdir -p "$dir/state" "$dir/spool/mocohost1" "$dir/spool/mocohost2" "$dir/log" "$dir/pids" "$dir/munge/key" \
    "$dir/tmp" "$dir/tmp.mocohost1" "$dir/tmp.mocohost2"
  chmod 755 "$dir" "$dir/munge"
  chmod 700 "$dir/munge/key"
  dd if=/dev/urandom of="$dir/munge/key/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/key/munge.key"
  local sock=$dir/munge/munge.socket
  cat >"$SLURM_CONF" <<EOF
# written by tests/multinode/slurm_2nodes.sh
ClusterName=moco2
SlurmctldHost=mocohost1($subnet.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
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
SchedulerParameters=sched_interval=2,bf_interval=1
SlurmdParameters=config_overrides
MpiDefault=pmix
JobRequeue=1
ReturnToService=2
KillWait=5
MinJobAge=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=mocohost1 NodeAddr=$subnet.1 CPUs=2 RealMemory=4000 State=UNKNOWN
NodeName=mocohost2 NodeAddr=$subnet.2 CPUs=2 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  # munged in this machine's own namespace: the hosts reach it through its socket file.
  setsid munged -F --socket="$sock" --key-file="$dir/munge/key/munge.key" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log" </dev/null >"$dir/log/munged.out" 2>&1 &
  echo $! >"$dir/pids/munged.pid"
  wait_for 15 munged sh -c "munge -S '$sock' -n | unmunge -S '$sock'"
  # The Slurm daemons inside the hosts (hosts.sh down ends them, whatever else happens).
  setsid "$hosts" exec 1 slurmctld -D -f "$SLURM_CONF" </dev/null >"$dir/log/slurmctld.out" 2>&1 &
  wait_for 30 slurmctld on 1 scontrol ping
  local i
  # Each slurmd sees its own TmpFS (a mount namespace binding DIR/tmp.HOST there): the PMIx plugin
  # makes TmpFS/spmix_appdir_<uid>_<job>.<step> on every node, which one shared directory refuses.
  for i in 1 2; do
    setsid "$hosts" exec "$i" unshare --mount --propagation private sh -c \
      "mount --bind '$dir/tmp.mocohost$i' '$dir/tmp' && exec slurmd -D -N mocohost$i -f '$SLURM_CONF'" \
      </dev/null >"$dir/log/slurmd$i.out" 2>&1 &
  done
  wait_for 60 "both nodes idle" sh -c "[ \"\$('$hosts' exec 1 sinfo -h -N -o %T | grep -cx idle)\" = 2 ]"
  on 1 sinfo -N
}

down() {
  local jobs p
  jobs=$(on 1 squeue -h -o %i 2>/dev/null | xargs) || true
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    on 1 scancel $jobs 2>/dev/null || true
    for _ in $(seq 40); do [ -z "$(on 1 squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  # slurmd, slurmctld and their steps live in the hosts: hosts.sh down ends them. munged is ours.
  p=$(cat "$dir/munge/munged.pid" 2>/dev/null || cat "$dir/pids/munged.pid" 2>/dev/null || true)
  if [ -n "$p" ] && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$dir"; then
    kill -TERM "$p"
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  fi
}

case $cmd in
up) up ;;
down) down ;;
*) sed -n '2,12p' "$0"; exit 2 ;;
esac
