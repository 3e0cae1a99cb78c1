#!/usr/bin/env bash
# Two builds of moco_dist on one config, alternately (A B A B ...), on one rank: the training steps'
# images/s from metrics.jsonl (the median over a run's steps after the first WARMUP), and B/A as the
# median of the rounds' ratios. What a refactor of the step costs, measured in one command.
#   bench/binaries_ab.sh MOCO_DIST_A MOCO_DIST_B ROUNDS CONFIG [key=value...]
#   e.g. bench/binaries_ab.sh /tmp/moco_dist_before build/moco_dist 5 tests/fixtures/tiny_synthetic.yaml train.epochs=2
set -euo pipefail
a=$1 b=$2 rounds=$3 config=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/binaries_ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
warmup=${WARMUP:-4}
rate() {  # the median images/s of a run's training steps after the warm-up
  local binary=$1
  shift
  rm -rf "$work/run"
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$binary" --config "$config" "$@" train.output_dir="$work/run" knn.memory_size=0 \
    >"$work/log" 2>&1 || { tail -5 "$work/log" >&2; exit 1; }
  /usr/bin/python3 - "$work/run/metrics.jsonl" "$warmup" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rates = [r["img_per_s"] for r in rows if r.get("event") == "train"][int(sys.argv[2]):]
print(statistics.median(rates))
PY
}
ratios=()
for ((i = 1; i <= rounds; i++)); do
  ra=$(rate "$a" "$@") rb=$(rate "$b" "$@")
  ratio=$(/usr/bin/python3 -c "print(f'{$rb / $ra:.3f}')")
  ratios+=("$ratio")
  printf 'round %d: A %.0f img/s, B %.0f img/s, B/A %s\n' "$i" "$ra" "$rb" "$ratio"
done
/usr/bin/python3 -c "import statistics, sys; r = sorted(map(float, sys.argv[1:])); print(f'B/A median {statistics.median(r):.3f} (min {r[0]:.3f}, max {r[-1]:.3f}) over {len(r)} rounds')" "${ratios[@]}"
