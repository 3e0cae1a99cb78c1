#!/usr/bin/env bash
# The main job's recipe search, reproducible: each line of a sweep file is a name and the overrides
# that make one recipe; every recipe trains from the main job's config, and the kNN results (and
# the linear probes, when moco_lincls is built) are printed as one table.
#   tools/sweep_main_job.sh SWEEP_FILE [OUT_DIR]      (build/moco_dist must exist)
# A sweep line:  name  key=value key=value ...     ('#' starts a comment)
set -euo pipefail
cd "$(dirname "$0")/.."
sweep=${1:?usage: tools/sweep_main_job.sh SWEEP_FILE [OUT_DIR]}
out=${2:-runs/sweep}
config=${SWEEP_CONFIG:-configs/fashion_mnist_quick.yaml}
bin=${SWEEP_BIN:-build/moco_dist}
mkdir -p "$out"
printf '%-28s %6s %8s %8s %8s %8s\n' recipe steps seconds random trained gain
while read -r name overrides; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  dir="$out/$name"
  if [[ ! -f "$dir/metrics.jsonl" ]] || ! grep -q '"encoder":"trained"' "$dir/metrics.jsonl"; then
    rm -rf "$dir"
    # shellcheck disable=SC2086
    "$bin" --config "$config" train.output_dir="$dir" train.resume=never train.tensorboard=false \
      ckpt.every_minutes=0 $overrides > "$dir.log" 2>&1 || { echo "$name: failed, see $dir.log"; continue; }
  fi
  /usr/bin/env python3 - "$dir/metrics.jsonl" "$name" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
knn = {r["encoder"]: r for r in rows if r.get("event") == "knn"}
train = [r for r in rows if r.get("event") == "train"]
last = train[-1]
print(f'{sys.argv[2]:<28} {last["step"]:6d} {last["elapsed_s"]:8.0f} {knn["random_init"]["top1"]:8.2f} '
      f'{knn["trained"]["top1"]:8.2f} {knn["trained"]["top1"] - knn["random_init"]["top1"]:+8.2f}')
PY
done < "$sweep"
