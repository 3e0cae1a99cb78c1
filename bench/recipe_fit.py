#!/usr/bin/env python3
"""Which MoCo v3 recipe fits which GPU memory at which optim.micro_batch: computed, not measured.

    bench/recipe_fit.py BUILD_DIR [--factor F] [--reserve-gb R]

Reads moco_dist's own estimate of a rank's step (`--dry-run`'s "memory (estimated ...)" line: the
views, the parameters with their copies, the activations one piece keeps, the heads) for each
recipe of configs/ (global batch 4096, fp16/bf16 activations) at optim.micro_batch 8 and prints a
Markdown table: for each GPU memory and number of GPUs, the largest power-of-two piece whose step
fits (one view's piece at a time), "whole" where the share's plain step fits (both views at once). (model.activation_checkpointing is left out: the
estimate counts the blocks' inputs, not the one block or stage that lives again during backward.)
The estimate is a lower bound of what a step holds; --factor (what bench/v3_memory.sh measured
against it on a CPU) scales its activations, --reserve-gb is left to CUDA's context, workspaces and
the allocator. A device's torch.cuda.max_memory_allocated has not confirmed any row yet.
"""
import argparse
import pathlib
import re
import subprocess

RECIPES = [("ViT-S", "moco_v3_vit_small_imagenet.yaml"), ("ViT-B", "moco_v3_vit_base_imagenet.yaml"),
           ("R50", "moco_v3_r50_imagenet.yaml")]
GPUS = [("80 GB (H100, A100 80G)", 80), ("40 GB (A100 40G)", 40), ("32 GB (V100 32G)", 32), ("24 GB", 24)]
RANKS = [8, 1]
GLOBAL, PROBE_PIECE = 4096, 8


def parts(build, config):
    """The estimate's parts in bytes, by key, for one rank of one at optim.micro_batch 8."""
    out = subprocess.run(
        [str(build / "moco_dist"), "--config", str(config), "--dry-run", "data.dataset=synthetic",
         "data.synthetic_channels=3", f"data.synthetic_train_size={GLOBAL}", f"optim.batch_size={GLOBAL}",
         f"optim.micro_batch={PROBE_PIECE}", "train.precision=bf16", "train.output_dir=/tmp/recipe_fit"],
        capture_output=True, text=True, check=True).stdout
    line = re.search(r"memory \(estimated before the model is built\): .*?\((.*?)\) of", out).group(1)
    return {key: float(value) for key, value in (p.rsplit(" ", 1) for p in line.split(", "))}


def fit(p, ranks, memory_gb, factor, reserve_gb):
    share = GLOBAL // ranks
    per_image = factor * p["optim.batch_size"] / PROBE_PIECE
    fixed = p["data.image_size"] * share / GLOBAL + sum(v for k, v in p.items() if k not in
                                                        ("data.image_size", "optim.batch_size"))
    budget = (memory_gb - reserve_gb) * 1e9
    if fixed + 2 * share * per_image <= budget:
        return "whole"
    piece = share // 2  # a piece of the whole share is the plain step, both views at once
    while piece >= 1:
        if fixed + piece * per_image <= budget:
            return str(piece)
        piece //= 2
    return "no"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", type=pathlib.Path)
    ap.add_argument("--factor", type=float, default=1.0)
    ap.add_argument("--reserve-gb", type=float, default=3.0)
    args = ap.parse_args()
    configs = pathlib.Path(__file__).resolve().parent.parent / "configs"
    estimates = {name: parts(args.build, configs / f) for name, f in RECIPES}
    header = ["GPU memory", "GPUs (images each)"] + [n for n, _ in RECIPES]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for gpu, memory in GPUS:
        for ranks in RANKS:
            cells = [fit(estimates[n], ranks, memory, args.factor, args.reserve_gb) for n, _ in RECIPES]
            print(f"| {gpu} | {ranks} ({GLOBAL // ranks}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
