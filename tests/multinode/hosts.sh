#!/usr/bin/env bash
# Test "hosts" on this machine: each a network namespace plus a UTS namespace (its own hostname),
# all joined by a bridge that lives in a namespace of its own, all seeing this machine's files (the
# shared file system). Nothing is added to the machine's own network namespace: the addresses
# (10.77.0.0/24 by default) exist only inside the test's namespaces, there is no default route and
# no NAT, so traffic only ever goes between the hosts the test made.
#
#   hosts.sh can                 exit 0 if namespaces can be made here, else print why and exit 77
#   hosts.sh up N [DIR]          make hosts 1..N (hostnames mocohost1..N, addresses 10.77.0.I on eth0)
#   hosts.sh down [N] [DIR]      end every process inside them, remove the namespaces (and so every
#                                interface), then check nothing is left (exit 1 naming it if so)
#   hosts.sh exec I CMD...       run CMD on host I (its network and UTS namespaces, same files)
#   hosts.sh link I up|down      host I's interface (eth0, inside its namespace)
#   hosts.sh kill I              host I loses its power: its link goes down (no FIN or RST reaches
#                                anyone), then every process inside it is killed, its holder too; the
#                                agent and exec refuse it from then on, as ssh fails to a dead host
#   hosts.sh pids I              the processes inside host I
#   hosts.sh shape I RATE LOSS [BURST]
#                                host I's link, both ways: tc tbf at RATE (e.g. 100mbit) and nftables
#                                dropping LOSS percent of the packets at random (netdev ingress of both
#                                ends of the link); this kernel has no netem, so no delay. BURST (tbf's
#                                bucket, default 32kbit) must grow with RATE: at 10gbit 32kbit is a
#                                3 us bucket, which holds the link far below its rate
#   hosts.sh drops I             how many packets the LOSS rules of host I's link have dropped
#   hosts.sh mtu BYTES           every link's MTU (both ends of each veth and the bridge; default 1500)
#
# DIR (default $MOCO_HOSTS_DIR, else /tmp/moco_hosts) keeps the state: the namespace names, one
# holder process per host that owns its UTS namespace (DIR/holderI.pid), and DIR/agent, a launch
# agent for Open MPI (--mca plm_rsh_agent DIR/agent): `agent HOST CMD...` runs CMD on that host the
# way ssh would (the words joined, run by sh, in a session of its own; the agent stays while the
# host's link is down, as an ssh client would). The namespace names derive from DIR, so two tests
# with two DIRs do not meet. MOCO_HOSTS_SUBNET=10.77.0 picks another /24.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
die() { echo "hosts.sh: $*" >&2; exit 1; }

can() {
  [ "$(id -u)" -eq 0 ] || { echo "hosts.sh: not root: network namespaces cannot be made"; return 77; }
  command -v ip >/dev/null || { echo "hosts.sh: no 'ip' (iproute2)"; return 77; }
  command -v nsenter >/dev/null && command -v unshare >/dev/null || { echo "hosts.sh: no nsenter/unshare (util-linux)"; return 77; }
  local probe=mocoprobe$$
  ip netns add "$probe" 2>/dev/null || { echo "hosts.sh: 'ip netns add' fails here"; return 77; }
  ip netns del "$probe"
}

state() {  # DIR: sets dir, tag, n, subnet
  dir=$(mkdir -p "$1" && cd "$1" && pwd)
  tag=mh$(printf '%s' "$dir" | cksum | cut -c1-6)
  n=$(cat "$dir/n" 2>/dev/null || echo 0)
  subnet=$(cat "$dir/subnet" 2>/dev/null || echo "${MOCO_HOSTS_SUBNET:-10.77.0}")
}
ns() { [ "$1" = sw ] && echo "${tag}sw" || echo "${tag}h$1"; }
holder() { cat "$dir/holder$1.pid" 2>/dev/null; }

# The namespaces of DIR that a run killed outright left (its DIR since removed, so `down` could not
# know of them: CI met one): their processes killed, the namespaces removed. Only DIR's names match.
remove_stale() {
  local p q
  for p in $(ip netns list | awk '{print $1}'); do
    case $p in
      "${tag}sw" | "${tag}h"[0-9]*)
        echo "hosts.sh: removing namespace $p, left by an earlier run in $dir" >&2
        for q in $(ip netns pids "$p" 2>/dev/null); do kill -KILL "$q" 2>/dev/null || true; done
        ip netns del "$p" 2>/dev/null || true
        ;;
    esac
  done
}

up() {
  local count=$1 i
  [ "$count" -ge 1 ] 2>/dev/null || die "up: N must be a positive number"
  can >&2 || exit 77
  [ "$n" -eq 0 ] || die "up: $dir already holds $n hosts (hosts.sh down first)"
  remove_stale
  echo "$count" >"$dir/n"
  echo "$subnet" >"$dir/subnet"
  n=$count
  ip netns add "$(ns sw)"
  ip -n "$(ns sw)" link add br0 type bridge
  ip -n "$(ns sw)" link set br0 up
  for i in $(seq "$count"); do
    ip netns add "$(ns "$i")"
    ip -n "$(ns sw)" link add "h$i" type veth peer name eth0 netns "$(ns "$i")"
    ip -n "$(ns sw)" link set "h$i" master br0 up
    ip -n "$(ns "$i")" link set lo up
    ip -n "$(ns "$i")" addr add "$subnet.$i/24" dev eth0
    ip -n "$(ns "$i")" link set eth0 up
    # The holder owns host i's UTS namespace (its hostname) for as long as the host exists.
    setsid ip netns exec "$(ns "$i")" unshare --uts sh -c "hostname mocohost$i && exec sleep infinity" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/holder$i.pid"
  done
  for i in $(seq "$count"); do
    for _ in $(seq 50); do
      [ "$(nsenter -t "$(holder "$i")" --uts hostname 2>/dev/null)" = "mocohost$i" ] && break
      sleep 0.1
    done
    [ "$(nsenter -t "$(holder "$i")" --uts hostname)" = "mocohost$i" ] || die "up: host $i has no hostname"
  done
  cat >"$dir/agent" <<EOF
#!/bin/sh
# Launch agent for Open MPI (--mca plm_rsh_agent $dir/agent): agent HOST CMD... runs CMD on HOST.
host=\$1; shift
i=\${host#mocohost}
case \$i in '' | *[!0-9]*) i=\$(echo "\$host" | sed -n 's/^$subnet\.\([0-9]*\)\$/\1/p') ;; esac
[ -n "\$i" ] || { echo "agent: unknown host \$host" >&2; exit 255; }
[ -f "$dir/holder\$i.pid" ] || { echo "agent: no host \$i" >&2; exit 255; }
# As under ssh: CMD runs in a session of its own on the host (a signal to the launcher's session does
# not reach it); the agent waits for it (setsid -w); and its end reaches the launcher only over the
# link: while host i's link is down, the agent stays, as an ssh client without ServerAliveInterval.
exec nsenter -t "\$(cat "$dir/holder\$i.pid")" --uts --net -- sh -c '
  setsid -w sh -c "\$1"; rc=\$?
  until ip -o link show eth0 | grep -q "[<,]UP[,>]"; do sleep 1; done
  exit \$rc' agent "\$*"
EOF
  chmod +x "$dir/agent"
  echo "hosts.sh: $count hosts up (mocohost1..$count = $subnet.1..$count), state in $dir"
}

# Every process whose network namespace is host i's (the holder, and all started with exec/agent).
pids() { ip netns pids "$(ns "$1")" 2>/dev/null || true; }

# A process that runs (a zombie waiting for its parent to reap it is gone).
alive() { [ -n "$1" ] && [ -n "$(ps -o stat= -p "$1" 2>/dev/null | grep -v Z)" ]; }

down() {
  local i left=0 p
  for i in $(seq "$n"); do
    for p in $(pids "$i"); do kill -KILL "$p" 2>/dev/null || true; done
  done
  for i in $(seq "$n"); do
    for _ in $(seq 50); do [ -z "$(pids "$i")" ] && break; sleep 0.1; done
    ip netns del "$(ns "$i")" 2>/dev/null || true
  done
  ip netns del "$(ns sw)" 2>/dev/null || true
  # Checked: no namespace, interface or process of ours is left.
  for p in $(ip netns list | awk '{print $1}'); do
    case $p in "$tag"*) echo "hosts.sh: namespace $p left behind" >&2; left=1 ;; esac
  done
  for i in $(seq "$n"); do
    p=$(holder "$i" || true)
    for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then echo "hosts.sh: holder $p of host $i left" >&2; left=1; fi
    rm -f "$dir/holder$i.pid"
  done
  if ip -o link | grep -Eq ": (h[0-9]+|br0)@?"; then echo "hosts.sh: an interface of ours is in the root namespace" >&2; left=1; fi
  rm -f "$dir/n" "$dir/subnet" "$dir/agent"
  [ "$left" -eq 0 ] || exit 1
  echo "hosts.sh: down, nothing left"
}

shape() {  # I RATE LOSS [BURST]
  local i=$1 rate=$2 loss=$3 burst=${4:-32kbit} end
  command -v nft >/dev/null || die "shape: no nft (Debian's nftables: tools/install_deps.sh)"
  for end in "$(ns "$i") eth0" "$(ns sw) h$i"; do
    set -- $end
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 400ms
    ip netns exec "$1" nft -f - <<EOF
table netdev moco {
  chain lossy { type filter hook ingress device "$2" priority 0; numgen random mod 100 < $loss counter drop; }
}
EOF
  done
}
drops() {
  local i=$1
  { ip netns exec "$(ns "$i")" nft list table netdev moco; ip netns exec "$(ns sw)" nft list table netdev moco; } |
    awk '/counter packets/ {for (f = 1; f < NF; f++) if ($f == "packets") n += $(f + 1)} END {print n + 0}'
}

mtu() {  # BYTES, on every link
  local i
  for i in $(seq "$n"); do
    ip -n "$(ns sw)" link set "h$i" mtu "$1"
    ip -n "$(ns "$i")" link set eth0 mtu "$1"
  done
  ip -n "$(ns sw)" link set br0 mtu "$1"
}

# Host i powered off: the link first, so that the killed processes' sockets say nothing to their peers.
kill_host() {
  local i=$1 p
  [ -f "$dir/holder$i.pid" ] || die "kill: no host $i in $dir"
  ip -n "$(ns "$i")" link set eth0 down
  rm -f "$dir/holder$i.pid"  # the agent and exec now refuse host i (its holder's pid may be reused)
  for _ in $(seq 50); do
    [ -n "$(pids "$i")" ] || break
    for p in $(pids "$i"); do kill -KILL "$p" 2>/dev/null || true; done
    sleep 0.1
  done
  [ -z "$(pids "$i")" ] || die "kill: processes left in host $i: $(pids "$i" | xargs)"
}

host_exec() {
  local i=$1 p
  shift
  p=$(holder "$i") || die "exec: no host $i in $dir"
  exec nsenter -t "$p" --uts --net -- "$@"
}

cmd=${1:-}
shift || true
case $cmd in
can) can ;;
up) state "${2:-${MOCO_HOSTS_DIR:-/tmp/moco_hosts}}"; up "${1:?up N [DIR]}" ;;
down)
  if [ $# -ge 1 ] && [[ $1 =~ ^[0-9]+$ ]]; then shift; fi
  state "${1:-${MOCO_HOSTS_DIR:-/tmp/moco_hosts}}"; down ;;
exec) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; i=$1; shift; host_exec "$i" "$@" ;;
link) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; ip -n "$(ns "$1")" link set eth0 "$2" ;;
kill) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; kill_host "${1:?kill I}" ;;
pids) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; pids "$1" ;;
shape) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; shape "${1:?shape I RATE LOSS [BURST]}" "${2:?RATE}" "${3:?LOSS}" "${4:-}" ;;
drops) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; drops "$1" ;;
mtu) state "${MOCO_HOSTS_DIR:-/tmp/moco_hosts}"; mtu "${1:?mtu BYTES}" ;;
*) sed -n '2,32p' "$self"; exit 2 ;;
esac
