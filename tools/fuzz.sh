#!/usr/bin/env bash
# libFuzzer runs of the parsers of files and text:
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# TARGETs (default all, one after another): config (YAML text + key=value overrides), idx (IDX
# images and labels, plain or gzip), ckpt_manifest (manifest.json), ckpt_shard (a shard's HDF5 file
# read through CheckpointReader). Builds fuzz/ with clang (-DMOCO_FUZZ=ON, ASan + UBSan + libFuzzer)
# in $MOCO_FUZZ_BUILD (default build-fuzz/), makes seed corpora from the repository's configs, small
# IDX files, a checkpoint's manifest and a shard, and runs each target for SECONDS_PER_TARGET
# (default 600) on one core. Fails if any target crashes, leaks, times out (-timeout=30 s per input)
# or exceeds 2 GB; the input that did it is left in $MOCO_FUZZ_BUILD/artifacts/<target>/.
# A real run's manifest is used as a seed when $MOCO_DIST (default build/moco_dist, README's build) exists.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config idx ckpt_manifest ckpt_shard)
build=$(realpath -m "${MOCO_FUZZ_BUILD:-$repo/build-fuzz}")

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DMOCO_FUZZ=ON -DMOCO_BUILD_TESTS=OFF -DMOCO_BUILD_BENCH=OFF -DMOCO_UNITY_BUILD=OFF
cmake --build "$build" --target "${targets[@]/#/fuzz_}"

seeds=$build/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{config,idx,ckpt_manifest,ckpt_shard}
# config: every config in the repository, and each again with overrides (NUL-separated).
for f in "$repo"/configs/*.yaml "$repo"/tests/fixtures/*.yaml; do
  cp "$f" "$seeds/config/$(basename "$f")"
  { cat "$f"; printf '\0optim.base_lr=0.06\0model.arch=resnet18\0data.mean=[0.5]'; } > "$seeds/config/$(basename "$f").overrides"
  # Sizes at and past their bounds, and a product of bounded sizes no machine holds (issue 57 X1, X2):
  # every one must end in a ConfigError, with validate_for_world's memory estimates, never an allocation.
  { cat "$f"; printf '\0model.dim=65536\0moco.queue_size=1073741824\0v3.mlp_dim=65536\0v3.projector_layers=16'; } \
    > "$seeds/config/$(basename "$f").sizes"
  { cat "$f"; printf '\0v3.mlp_dim=1000000000000\0model.width=1e300\0optim.batch_size=9223372036854775807'; } \
    > "$seeds/config/$(basename "$f").huge"
done
# idx: the first byte is the mode (0 as is, 1 gzip the rest, 2 gzip and cut); see fuzz/fuzz_idx.cpp.
python3 - "$seeds/idx" <<'PY'
import gzip, struct, sys
out = sys.argv[1]
images = struct.pack(">IIII", 0x803, 3, 4, 5) + bytes(range(60))
labels = struct.pack(">II", 0x801, 3) + bytes([0, 9, 4])
for name, data in (("images", images), ("labels", labels)):
    for mode, body in ((0, data), (0, gzip.compress(data, mtime=0)), (1, data), (2, b"\x00\x18" + data)):
        open(f"{out}/{name}_mode{mode}_{len(body)}", "wb").write(bytes([mode]) + body)
PY
# ckpt_shard: the target writes its own small checkpoint's shard; ckpt_manifest: that manifest, and a
# real run's when README's build is there.
# Made only when a checkpoint target runs: the others are not built (fuzz.sh 600 config).
if [[ " ${targets[*]} " == *" ckpt_"* ]]; then
  MOCO_FUZZ_SEED_OUT="$seeds/ckpt_shard" "$build/fuzz/fuzz_ckpt_shard" > /dev/null 2>&1 || true
  [ -f "$seeds/ckpt_shard/shard_seed.h5" ] || { echo "fuzz: could not write the shard seed" >&2; exit 1; }
  mv "$seeds/ckpt_shard/manifest.json" "$seeds/ckpt_manifest/small.json"
  moco_dist=${MOCO_DIST:-$repo/build/moco_dist}
  if [ -x "$moco_dist" ]; then
    run=$build/seed_run
    rm -rf "$run"
    OMP_NUM_THREADS=1 "$moco_dist" --config "$repo/tests/fixtures/tiny_synthetic.yaml" train.output_dir="$run" \
      train.threads=1 train.stop_at_step=1 ckpt.every_steps=1 knn.memory_size=64 knn.query_size=32 > "$run.log" 2>&1
    cp "$run/checkpoints/$(cat "$run/checkpoints/latest")/manifest.json" "$seeds/ckpt_manifest/run.json"
  else
    echo "fuzz: $moco_dist not built: the manifest corpus starts from the small manifest only"
  fi
fi

# Leaks inside installed libraries that our code cannot fix are suppressed (tools/lsan.supp says which
# and why); our own stay fatal.
export LSAN_OPTIONS="suppressions=$repo/tools/lsan.supp:print_suppressions=0"
status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t artifacts=$build/artifacts/$t
  mkdir -p "$corpus" && rm -rf "$artifacts" && mkdir -p "$artifacts"
  echo "fuzz: $t for ${seconds}s"
  # ckpt_shard: nearly every malformed file makes HDF5 lose memory on its error paths (suppressed, see
  # tools/lsan.supp), and each input that does triggers libFuzzer's full-heap leak scan, about 0.5 s
  # with LibTorch loaded: 5 inputs/s instead of 150. So it fuzzes without leak checks, and then every
  # input of its corpus is replayed once with them.
  leaks=1
  [ "$t" = ckpt_shard ] && leaks=0
  # The corpus folder keeps what earlier runs found; the seeds are read alongside it.
  rc=0
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
    -detect_leaks=$leaks -artifact_prefix="$artifacts/" "$corpus" "$seeds/$t" > "$build/fuzz_$t.log" 2>&1 || rc=$?
  if [ $rc -eq 0 ] && [ $leaks -eq 0 ]; then
    echo "fuzz: $t: replaying its corpus with leak checks"
    "$build/fuzz/fuzz_$t" -runs=0 -timeout=30 -rss_limit_mb=2048 -detect_leaks=1 -artifact_prefix="$artifacts/" \
      "$corpus" "$seeds/$t" >> "$build/fuzz_$t.log" 2>&1 || rc=$?
  fi
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|runtime error|broken promise|^stat::' "$build/fuzz_$t.log" || true
  if [ $rc -ne 0 ] || compgen -G "$artifacts/*" > /dev/null; then
    echo "fuzz: $t FAILED (exit $rc): see $build/fuzz_$t.log and $artifacts/" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "fuzz: every target clean"
exit $status
