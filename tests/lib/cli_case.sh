# Sourced first by the shell tests of one case per ctest entry (CASE BUILD_DIR WORK_DIR): the
# programs, the tiny configs, a fresh WORK_DIR, fail(), expect() and no_work_done().
set -euo pipefail
case_name=$1 build=$2 work=$3
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dist=$build/moco_dist py=/usr/bin/python3
tiny=$src/tests/fixtures/tiny_synthetic.yaml tiny_v3=$src/tests/fixtures/tiny_synthetic_v3.yaml
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work" && mkdir -p "$work"
out=$work/out  # train.output_dir of every run: must not exist after a config error

fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }

# shellcheck source=expect.sh
source "$src/tests/lib/expect.sh"  # expect CODE TEXT... -- command...
no_work_done() { [ ! -e "$out" ] || fail "$out was created: work started before the error"; }
