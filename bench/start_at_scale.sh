#!/usr/bin/env bash
# What a run of the shipped ImageNet config costs before and between its steps as the train split
# grows (issue 40): on generated ImageFolders of SIZES train images (1,000 classes of small JPEGs,
# tools/make_image_folder.py --pool), 2 CPU ranks, moco_v2_r50_imagenet.yaml with only the network
# and the image size made CPU-sized (resnet18, 64 px, batch 32). For each size it prints:
#   - launch to first step, cold (no file list cached, the page cache dropped where root may) and
#     warm (the file list cached by the cold run, the files in the page cache);
#   - the scan of train/ cold and the cached list's read warm (the rank log's lines);
#   - the peak RSS of each rank (GNU time), warm;
#   - an epoch start's cost for each rank (bench_data --epoch-order: the shuffled order and its
#     share, all that an epoch boundary does that grows with the split);
#   - the checkpoint with the paper's queue (65,536 keys), written synchronously: size and seconds.
# Then one checkpoint with resnet50 (the paper's network and queue) on the smallest folder.
#
#   bench/start_at_scale.sh BUILD_DIR WORK_DIR [SIZE...]     (default sizes 10000 100000 1281000)
#
# The folders stay in WORK_DIR (1.28M files take ~5 GB and ~2 minutes to write) and are reused.
# Not a ctest entry: what CI keeps of it is that no kNN row comes before the first step's
# (cli.train.knn_every_epochs) and the file-list cache's own tests.
set -euo pipefail
build=$(cd "$1" && pwd) work=$2
shift 2
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1281000)
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

folder() {  # SIZE: the folder of SIZE train images (made once), its path on stdout
  local size=$1 dir=$work/imagenet_$1
  local per_class=$((size / 1000))
  local val=$((per_class < 50 ? per_class : 50))
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    echo "writing $dir: 1000 classes x $per_class train, x $val val" >&2
    /usr/bin/python3 "$src/tools/make_image_folder.py" "$dir" --classes 1000 --train "$per_class" --val "$val" \
      --sides 32 48 --pool 4 >&2
    touch "$dir/.complete"
    sleep 2  # the file-list cache keeps no list of a folder changed within 2 s
  fi
  echo "$dir"
}

drop_page_cache() {
  sync
  if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then echo dropped; else echo "not dropped (needs root)"; fi
}

# LABEL DATA_ROOT OUT ARCH STEPS: one run; prints "seconds_to_first_step peak_rss_mib peak_rss_mib" (a rank each).
run() {
  local label=$1 root=$2 out=$3 arch=$4 steps=$5
  rm -rf "$out"
  local start
  start=$(date +%s.%N)
  mpirun -np 2 --oversubscribe /usr/bin/time -f "peak_rss_kib %M" \
    "$build/moco_dist" --config "$src/configs/moco_v2_r50_imagenet.yaml" data.root="$root" model.arch="$arch" \
    data.image_size=64 optim.batch_size=32 train.log_every=1 train.stop_at_step="$steps" ckpt.async=false \
    train.output_dir="$out" >"$out.console" 2>&1 &
  local job=$! first=""
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$first" ] && grep -q '"event":"train"' "$out/metrics.jsonl" 2>/dev/null; then first=$(date +%s.%N); fi
    sleep 0.05
  done
  wait "$job" || { tail -n 30 "$out.console"; echo "start_at_scale: the $label run failed" >&2; exit 1; }
  [ -n "$first" ] || first=$(date +%s.%N)  # ended between two looks: an upper bound
  local rss
  rss=$(grep -o 'peak_rss_kib [0-9]*' "$out.console" | awk '{printf "%.0f ", $2 / 1024}')
  echo "$(awk -v a="$first" -v b="$start" 'BEGIN {print a - b}') $rss"
}

scan_line() { grep -h -E "train: (scanned|file list of)" "$1" | grep -v "rank 0 keeps" | head -n 1 | sed 's/^.*\] //'; }

printf '%s\n' "| train images | launch to step 1, cold | warm | scan cold | cached list | peak RSS a rank (MiB) | epoch start a rank | checkpoint (queue 65,536) |"
printf '%s\n' "|---|---|---|---|---|---|---|---|"
for size in "${sizes[@]}"; do
  root=$(folder "$size")
  rm -f "$root"/.moco_filelist-*.txt
  dropped=$(drop_page_cache)
  result=$(run cold "$root" "$work/run_cold_$size" resnet18 2)
  read -r cold _ _ <<<"$result"
  result=$(run warm "$root" "$work/run_warm_$size" resnet18 2)
  read -r warm rss0 rss1 <<<"$result"
  scan=$(scan_line "$work/run_cold_$size.console")
  cached=$(scan_line "$work/run_warm_$size.console")
  order=$("$build/bench_data" --epoch-order "$(find "$root/train" -type f | wc -l)" | grep -o '[0-9.]* ms')
  ckpt=$(grep '"event":"checkpoint"' "$work/run_warm_$size/metrics.jsonl" | tail -n 1 |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f MiB in %.2f s" % (r["bytes"] / 2**20, r["seconds"]))')
  echo "page cache $dropped before the cold run; cold scan: $scan; warm: $cached" >&2
  printf '| %s | %.1f s | %.1f s | %s | %s | %s, %s | %s | %s |\n' "$size" "$cold" "$warm" \
    "$(grep -o 'in [0-9.]*s' <<<"$scan" | head -n 1 | tr -d 'in ')" "$(grep -o '([0-9.]*s)' <<<"$cached" | tr -d '()')" \
    "$rss0" "$rss1" "$order" "$ckpt"
done
# The paper's network as well as its queue: the checkpoint a real run writes.
run resnet50 "$(folder "${sizes[0]}")" "$work/run_r50" resnet50 1 >/dev/null
grep '"event":"checkpoint"' "$work/run_r50/metrics.jsonl" | tail -n 1 |
  /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print("resnet50, queue 65,536: checkpoint %.0f MiB written in %.2f s (synchronous)" % (r["bytes"] / 2**20, r["seconds"]))'
