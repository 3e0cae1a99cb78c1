# Sourced by the single-node Slurm tests (tests/launch/slurm_*_test.sh) once they have set `src`
# (the repository), `work` (their folder) and `slurm_cpus` (the CPUs the node declares): a skip (exit
# 77, which ctest shows) when not root, since the Slurm daemons run as root; `fail`; then
# tests/lib/slurm_cluster.sh's one node in $work/cluster, stopped on exit, with SLURM_CONF exported.
cluster_sh=$src/tests/lib/slurm_cluster.sh
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: not root: the Slurm daemons (slurmctld, slurmd) of the test cluster run as root"
  exit 77
fi
fail() { echo "FAIL: $*" >&2; [ -f "$work/job.out" ] && tail -n 40 "$work/job.out" >&2; exit 1; }

cluster=$work/cluster
# A cluster left by an earlier run killed outright (SIGKILL leaves no trap to run) goes first.
[ ! -d "$cluster/pids" ] || "$cluster_sh" down "$cluster" || true
rm -rf "$work" && mkdir -p "$work"
"$cluster_sh" up "$cluster" --cpus "$slurm_cpus" >"$work/slurm_up.log" 2>&1 ||
  { cat "$work/slurm_up.log"; fail "slurm_cluster.sh up"; }
trap '"$cluster_sh" down "$cluster" >/dev/null 2>&1 || true' EXIT
export SLURM_CONF=$cluster/slurm.conf
