#!/usr/bin/env bash
# bench_dist across two test hosts on this machine (tests/multinode/hosts.sh: network namespaces
# joined by a bridge), host 2's link shaped by tc tbf, one rank per host:
#
#   bench/bench_dist_hosts.sh BUILD_DIR OUT_DIR [RATE...]    (as root)
#
# RATE is tc's (10gbit, 1gbit, ...) or `none` for the bare veth link; default: 10gbit 1gbit. For
# each RATE, BENCH_REPEATS (default 2) runs, each on freshly made hosts: mpirun -np 2, one rank on
# mocohost1 and one on mocohost2, so every byte between the ranks crosses the shaped link (Open
# MPI's TCP BTL on the test subnet only; no shared memory). One rank per host, because the hosts
# share this machine's cores: two per host would put four one-thread ranks on two cores.
# bench_dist runs with BENCH_DIST_ARGS (default: --iters 10 --step-model resnet18 --step-batch 8
# --bucket-mb 4: 4 MiB buckets, so that only a small last one launches when backward ends)
# and writes OUT_DIR/<rate>-<run>.json and .txt; OUT_DIR/summary.txt has one line per run, with
# the raw MPI_Allreduce bus bandwidth as a share of the shaped rate (the check that tbf applies)
# and the bytes host 2's interface received during the run (the check that they crossed it).
# After the runs of a RATE, one more (<rate>-yield) times the all-reduces alone with
# --mca mpi_yield_when_idle 1: a blocking MPI_Allreduce polls without yielding, and with both
# cores taken by the two ranks that starved the kernel's TCP/veth work (the raw all-reduce moved
# half of what it does when it yields, docs/benchmarks.md), so the ratio is given against both.
# BENCH_MPIRUN_ARGS
# adds mpirun options to every run (e.g. --mca btl_tcp_progress_thread 1); BENCH_MTU (default 1500)
# sets every link's MTU (bench/tcp_hosts.sh: what the kernel's TCP moves at each, and its CPU cost).
# The hosts are taken down on every exit, also a failed or interrupted one.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,23p' "$0"; exit 2; }
build=$(cd "$1" && pwd)
mkdir -p "$2" && out=$(cd "$2" && pwd)
shift 2
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(10gbit 1gbit)
src=$(cd "$(dirname "$0")/.." && pwd)
hosts=$src/tests/multinode/hosts.sh
repeats=${BENCH_REPEATS:-2}
mtu=${BENCH_MTU:-1500}
read -r -a bench_args <<<"${BENCH_DIST_ARGS:---iters 10 --step-model resnet18 --step-batch 8 --bucket-mb 4}"
read -r -a extra_mpirun_args <<<"${BENCH_MPIRUN_ARGS:-}"
yielding=(--mca mpi_yield_when_idle 1)
die() { echo "bench_dist_hosts.sh: $*" >&2; exit 1; }

[ -x "$build/bench_dist" ] || die "no $build/bench_dist (ninja bench_dist)"
why=$("$hosts" can) || die "$why"
export MOCO_HOSTS_DIR=$out/hosts OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Hosts left by an earlier run killed outright (SIGKILL runs no trap) go first.
[ ! -f "$MOCO_HOSTS_DIR/n" ] || "$hosts" down "$MOCO_HOSTS_DIR" >&2 || true
trap '"$hosts" down "$MOCO_HOSTS_DIR" >/dev/null || echo "bench_dist_hosts.sh: the hosts were not cleaned up" >&2' EXIT
trap 'exit 130' INT TERM  # through the EXIT trap
net=10.77.0.0/24
printf 'mocohost1 slots=1\nmocohost2 slots=1\n' >"$out/hostfile"
# shellcheck disable=SC2054  # "self,tcp" is one argument
# --bind-to none: each host's daemon would bind its one rank to "its" core 0, the same core for both.
mpirun_args=(--hostfile "$out/hostfile" -np 2 --map-by node --bind-to none --oversubscribe -x OMP_NUM_THREADS
  --mca plm_rsh_agent "$MOCO_HOSTS_DIR/agent" --mca oob_tcp_if_include "$net"
  --mca btl self,tcp --mca btl_tcp_if_include "$net" "${extra_mpirun_args[@]}")

# tbf's bucket: 1 ms at RATE (at least tc's 32kbit). A bucket much smaller than what the kernel
# sends per timer tick or per GSO packet keeps the link well below RATE at gigabit rates.
burst_for() {
  [[ $1 =~ ^[0-9]+[gm]bit$ ]] || die "rate '$1': give it as whole gbit or mbit (e.g. 10gbit, 500mbit), or none"
  case $1 in
  *gbit) echo "$(( ${1%gbit} * 1000 ))kbit" ;;
  *mbit) echo "$(( ${1%mbit} > 32 ? ${1%mbit} : 32 ))kbit" ;;
  esac
}
# RATE in GB/s (bytes), for the share of it the raw all-reduce reached.
gbytes_per_s() {
  case $1 in
  *gbit) echo "${1%gbit} / 8" | bc -l ;;
  *mbit) echo "${1%mbit} / 8000" | bc -l ;;
  *) echo 0 ;;
  esac
}
# shellcheck disable=SC2016  # awk's $1, $2
rx_bytes() { "$hosts" exec 2 awk '$1 == "eth0:" {print $2}' /proc/net/dev; }  # host 2's namespace

run_once() {  # RATE RUN [MPIRUN_ARGS...]: RUN "yield" times the all-reduces alone
  local rate=$1 run=$2 name=$1-$2 before moved
  shift 2
  local args=("${bench_args[@]}")
  [ "$run" != yield ] || args=(--iters 10 --allreduce-only)
  "$hosts" up 2 "$MOCO_HOSTS_DIR" >/dev/null
  "$hosts" mtu "$mtu"
  if [ "$rate" != none ]; then "$hosts" shape 2 "$rate" 0 "$(burst_for "$rate")"; fi
  # One rank per host: the two hostnames, in rank order.
  local where
  where=$("$hosts" exec 1 mpirun "${mpirun_args[@]}" hostname | sort | xargs)
  [ "$where" = "mocohost1 mocohost2" ] || die "mpirun placed the ranks on '$where', not on mocohost1 and mocohost2"
  before=$(rx_bytes)
  echo "[$(date '+%F %T')] $name: load $(cut -d' ' -f1-3 /proc/loadavg); mpirun ${mpirun_args[*]} $* bench_dist ${args[*]}"
  "$hosts" exec 1 mpirun "${mpirun_args[@]}" "$@" "$build/bench_dist" "${args[@]}" --json "$out/$name.json" \
    >"$out/$name.txt" 2>&1 || { tail -n 30 "$out/$name.txt" >&2; die "bench_dist failed ($name)"; }
  moved=$(( $(rx_bytes) - before ))
  [ "$rate" = none ] || "$hosts" exec 2 tc -s qdisc show dev eth0 >>"$out/$name.txt"
  "$hosts" down "$MOCO_HOSTS_DIR" >/dev/null
  summarise "$rate" "$name" "$moved" | tee -a "$out/summary.txt"
}

summarise() {  # RATE NAME HOST2_RX_BYTES
  python3 - "$out/$2.json" "$2" "$3" "$(gbytes_per_s "$1")" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name, rx, rate = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
a = next(x for x in r["allreduce"] if x["model"] == "resnet18")
of_rate = f" ({a['raw_mpi_busbw_GBps'] / rate:.0%} of the shaped rate)" if rate else ""
line = (f"{name}: resnet18 {a['bytes'] / 2**20:.1f} MiB all-reduce: reducer {a['reducer_busbw_GBps']:.3f} GB/s, "
        f"raw MPI {a['raw_mpi_busbw_GBps']:.3f} GB/s{of_rate}, reducer/raw {a['raw_mpi_s'] / a['reducer_s']:.2f}")
if "step" not in r:
    print(f"{line}; host 2 received {rx / 1e6:.0f} MB")
    sys.exit()
s, n, o = r["step"], r["step_no_overlap"], r["overlap"]
print(f"{line}; step {s['model']} b={s['per_rank_batch']}: floor {s['step_without_comm_s'] * 1e3:.0f} ms, "
      f"overlap {s['step_s'] * 1e3:.0f} ms ({s['exposed_share']:.1%} exposed), "
      f"no overlap {n['step_s'] * 1e3:.0f} ms ({n['exposed_share']:.1%} exposed), "
      f"exposed overlap/no-overlap {o['exposed_overlap_over_no_overlap']:.2f} "
      f"(paired {o['exposed_paired_overlap_over_no_overlap']:.2f}), reducer waits "
      f"{o['reducer_wait_overlap_s'] * 1e3:.0f}/{o['reducer_wait_no_overlap_s'] * 1e3:.0f} ms; "
      f"host 2 received {rx / 1e6:.0f} MB")
PY
}

command -v bc >/dev/null || die "no bc"
for rate in "${rates[@]}"; do [ "$rate" = none ] || burst_for "$rate" >/dev/null; done  # all checked first
echo "$(date '+%F %T'): $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; rates ${rates[*]}, $repeats runs each, MTU $mtu" \
  | tee -a "$out/summary.txt"
for rate in "${rates[@]}"; do
  for run in $(seq "$repeats"); do run_once "$rate" "$run"; done
  run_once "$rate" yield "${yielding[@]}"
done
echo "results in $out (summary.txt)"
