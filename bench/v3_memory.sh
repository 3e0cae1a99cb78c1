#!/usr/bin/env bash
# issue 58's memory measurement: a MoCo v3 step's peak resident memory and time on this CPU, whole
# against optim.micro_batch and model.activation_checkpointing, each setting in its own process
# (bench_v3_memory), one after another in this one command; ratios against the whole batch's.
#
#   bench/v3_memory.sh BUILD_DIR [ARCH SIDE BATCH STEPS]    (default vit_small 224 64 2)
#
# Prints one JSON line per setting, then a table. Needs memory for the whole batch's activations
# (ViT-S, 224 px, 64 images: about 10 GB).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: bench/v3_memory.sh BUILD_DIR [ARCH SIDE BATCH STEPS]}
arch=${2:-vit_small} side=${3:-224} batch=${4:-64} steps=${5:-2}
bench=("$build/bench_v3_memory" --config "$repo/tests/fixtures/tiny_synthetic_v3.yaml" --arch "$arch" --side "$side"
       --batch "$batch" --steps "$steps")
lines=()
for setting in "" "--micro-batch $((batch / 4))" "--micro-batch $((batch / 8))" "--checkpointing" \
               "--micro-batch $((batch / 8)) --checkpointing"; do
  # shellcheck disable=SC2086  # the setting is words
  line=$("${bench[@]}" $setting 2>/dev/null | tail -1)
  echo "$line"
  lines+=("$line")
done
printf '%s\n' "${lines[@]}" | /usr/bin/python3 -c "$(cat <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
base = rows[0]
print("%-34s %8s %7s %9s %9s" % ("setting", "step s", "x time", "peak MB", "x memory"))
for r in rows:
    name = ("micro_batch %d" % r["micro_batch"]) if r["micro_batch"] else "whole batch"
    if r["activation_checkpointing"]:
        name += " + checkpointing"
    print("%-34s %8.2f %7.2f %9.0f %9.2f" % (name, r["step_s"], r["step_s"] / base["step_s"], r["peak_rss_mb"],
                                            r["peak_rss_mb"] / base["peak_rss_mb"]))
PY
)"
