#!/bin/bash
# Open MPI's daemon (orted) on a remote host, watched: launch/mpirun/moco.sh --hostfile starts the
# daemons through it (--mca orte_launch_agent "<this script> GRACE_S orted").
#
#   orted_watchdog.sh GRACE_S orted [ORTED OPTIONS...]
#
# A host whose link to mpirun went down keeps its orted: its ranks time out (dist.timeout_s) and end,
# but orted waits for mpirun, which it can no longer reach, and TCP only gives up on a connection
# with unsent data after ~15 minutes. Once the ranks orted started have all ended and orted is still
# running GRACE_S seconds later, this script ends it (TERM, then KILL). Where mpirun reaches the
# daemon, it ends the daemon well within that time.
grace=$1
shift
# The watchdog must stay orted's parent: no --daemonize (Open MPI adds it in some launch modes).
args=()
for a in "$@"; do [ "$a" = --daemonize ] || args+=("$a"); done
"${args[@]}" &
orted_pid=$!
trap 'kill -TERM $orted_pid 2>/dev/null || true' TERM INT HUP
seen=0 gone=0 host=$(hostname)
while kill -0 "$orted_pid" 2>/dev/null; do
  children=$(pgrep -P "$orted_pid" || true)
  if [ -n "$children" ]; then
    seen=1 gone=0
  elif [ "$seen" -eq 1 ]; then
    gone=$((gone + 1))
    if [ "$gone" -gt "$grace" ]; then
      echo "[orted_watchdog.sh] $host: the ranks ended ${grace} s ago and orted still runs (mpirun unreachable?): ending it" >&2
      kill -TERM "$orted_pid" 2>/dev/null || true
      sleep 2
      kill -KILL "$orted_pid" 2>/dev/null || true
      break
    fi
  fi
  sleep 1 &
  wait $! 2>/dev/null || true
done
rc=0
wait "$orted_pid" || rc=$?
exit "$rc"
