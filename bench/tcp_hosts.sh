#!/usr/bin/env bash
# What the kernel's TCP alone moves between two test hosts on this machine (tests/multinode/hosts.sh),
# and the CPU time it spends per byte: the ceiling under bench_dist_hosts.sh's MPI figures.
#
#   bench/tcp_hosts.sh OUT_DIR [MTU...]    (as root; default MTUs: 1500 65000)
#
# For each MTU, on fresh hosts: one stream host 1 -> host 2 alone, then one each way at once (what a
# 2-rank ring all-reduce does), TCP_BYTES (default 3 GiB) per stream, 1 MiB sendall/recv_into calls
# from Python. It prints Gbit/s per stream and the machine's busy CPU time (all cores, /proc/stat:
# user, system, irq, softirq) per byte moved. Unshaped: tbf would only lower the rate. The hosts are
# taken down on every exit.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,11p' "$0"; exit 2; }
mkdir -p "$1" && out=$(cd "$1" && pwd)
shift
mtus=("$@")
[ ${#mtus[@]} -gt 0 ] || mtus=(1500 65000)
hosts=$(cd "$(dirname "$0")/.." && pwd)/tests/multinode/hosts.sh
bytes=${TCP_BYTES:-3221225472}
die() { echo "tcp_hosts.sh: $*" >&2; exit 1; }
why=$("$hosts" can) || die "$why"
export MOCO_HOSTS_DIR=$out/hosts
[ ! -f "$MOCO_HOSTS_DIR/n" ] || "$hosts" down "$MOCO_HOSTS_DIR" >&2 || true
trap '"$hosts" down "$MOCO_HOSTS_DIR" >/dev/null || echo "tcp_hosts.sh: the hosts were not cleaned up" >&2' EXIT
trap 'exit 130' INT TERM

receive() {  # I PORT: host I takes one connection and reads it to the end
  "$hosts" exec "$1" python3 -c '
import socket, sys
s = socket.create_server(("0.0.0.0", int(sys.argv[1])))
c, _ = s.accept()
b = bytearray(1 << 20)
while c.recv_into(b):
    pass' "$2"
}
send() {  # I ADDRESS PORT: host I sends TCP_BYTES and prints the stream's rate
  "$hosts" exec "$1" python3 -c '
import socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(100):
    try:
        s = socket.create_connection((addr, port))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
b, t = bytes(1 << 20), time.perf_counter()
for _ in range(n >> 20):
    s.sendall(b)
s.close()
print(f"{n * 8 / (time.perf_counter() - t) / 1e9:.2f}")' "$2" "$3" "$bytes"
}
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }  # jiffies, all cores

streams() {  # NAME one|both LABEL
  local c0 c1 r1 r2="" moved=$bytes
  receive 2 5001 &
  [ "$2" = one ] || { receive 1 5002 & }
  c0=$(busy)
  if [ "$2" = one ]; then
    r1=$(send 1 10.77.0.2 5001)
  else
    send 2 10.77.0.1 5002 >"$out/back" &
    r1=$(send 1 10.77.0.2 5001)
    wait
    r2=$(cat "$out/back")
    moved=$(( 2 * bytes ))
  fi
  wait
  c1=$(busy)
  echo "$1: $3: ${r1}${r2:+ and $r2} Gbit/s; CPU $(echo "($c1 - $c0) * 10^9 / $(getconf CLK_TCK) / $moved" | bc -l | xargs printf '%.2f') ns per byte moved" |
    tee -a "$out/summary.txt"
}

echo "$(date '+%F %T'): $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" |
  tee -a "$out/summary.txt"
for mtu in "${mtus[@]}"; do
  "$hosts" up 2 "$MOCO_HOSTS_DIR" >/dev/null
  "$hosts" mtu "$mtu"
  streams "MTU $mtu" one "one way"
  streams "MTU $mtu" both "both ways at once"
  "$hosts" down "$MOCO_HOSTS_DIR" >/dev/null
done
