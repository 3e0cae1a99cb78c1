#!/usr/bin/python3
"""Writes the official MoCo models' state_dict layouts as test data for tests/app/official_export_test.cpp.

    /usr/bin/python3 tools/gen_official_layout.py MOCO MOCO_V3 TIMM [OUT_DIR]

MOCO: a checkout of facebookresearch/moco (commit 7397dfe1), MOCO_V3: of facebookresearch/moco-v3
(commit c349e6e2), TIMM: of huggingface/pytorch-image-models at tag v0.4.9 (moco-v3's README pins
timm 0.4.9). Nothing of them is copied: their own builders are run (on the CPU, Debian's torch and
torchvision) and only the resulting names and shapes are written, one file per model, to OUT_DIR
(default tests/fixtures/official_layout). Each line: key<TAB>shape<TAB>dtype<TAB>kind, where kind is `param N`
(N: the parameter's index in model.parameters(), the index optimizer.state_dict()'s `state` uses)
or `buffer`. Keys carry DistributedDataParallel's `module.` prefix, as main_moco.py saves them.
"""
import functools
import os
import sys

HEADERS = {
    "moco_v2_resnet50": [
        "MoCo v2 (facebookresearch/moco @ 7397dfe1): moco.builder.MoCo(torchvision resnet50, dim=128, K=65536,",
        "mlp=True), as main_moco.py builds it (lines 248-255) with --mlp (v2's recipe; --moco-dim 128 and --moco-k 65536 by",
        "default, lines 154-173) and saves it under DistributedDataParallel (lines 270-277: the module. prefix;",
        "save_checkpoint's state_dict, lines 380-389). builder.py: encoder_q and encoder_k with num_classes=dim",
        "(lines 31-32), fc replaced by Linear(2048, 2048), ReLU, the old fc (lines 34-41: fc.0, fc.2), the",
        "queue buffer [dim, K] (line 50) and queue_ptr, long [1] (line 53). SGD over model.parameters()",
        "(lines 291-296): encoder_q's then encoder_k's parameters; only encoder_q's get gradients (line 47).",
    ],
    "moco_v3_resnet50": [
        "MoCo v3 ResNet-50 (facebookresearch/moco-v3 @ c349e6e2): moco.builder.MoCo_ResNet(torchvision resnet50",
        "with zero_init_residual=True, dim=256, mlp_dim=4096), as main_moco.py builds it (lines 184-187), with",
        "SyncBN (line 196: same keys) under DistributedDataParallel (lines 208, 213: the module. prefix). builder.py:",
        "base_encoder and momentum_encoder with num_classes=mlp_dim (lines 27-28); _build_mlp (lines 36-52):",
        "Linear without bias, BatchNorm1d and ReLU between layers, BatchNorm1d(affine=False) last when last_bn",
        "(default True); MoCo_ResNet (lines 99-109): fc replaced by a 2-layer projector (last_bn), predictor of",
        "2 layers with last_bn=False. LARS or AdamW over model.parameters() (lines 224-230): base_encoder's,",
        "momentum_encoder's, then the predictor's parameters; the momentum encoder's get no gradient (line 34).",
    ],
    "moco_v3_vit_small": [
        "MoCo v3 ViT-Small (facebookresearch/moco-v3 @ c349e6e2): moco.builder.MoCo_ViT(vits.vit_small, dim=256,",
        "mlp_dim=4096), as main_moco.py builds it (lines 180-183) under DistributedDataParallel (lines 208, 213).",
        "vits.py: VisionTransformerMoCo subclasses timm 0.4.9's VisionTransformer (lines 25-27; timm's",
        "vision_transformer.py lines 224-253: patch_embed, cls_token, pos_embed, blocks, norm, head), pos_embed a",
        "fixed sin-cos parameter without gradient (lines 68-69), the patch projection without gradient under",
        "--stop-grad-conv1 (lines 49-51); vit_small: patch 16, embed_dim 384, depth 12, 12 heads, mlp_ratio 4,",
        "qkv_bias (lines 115-120). builder.py: MoCo_ViT (lines 112-122) replaces head by a 3-layer projector",
        "and builds a 2-layer predictor, both with _build_mlp's default last_bn=True (line 36), so the",
        "predictor ends in BatchNorm1d(256, affine=False): predictor.4.running_mean, running_var,",
        "num_batches_tracked. LARS or AdamW over model.parameters() (lines 224-230).",
    ],
}


def layout(model):
    """[(key, shape, dtype, kind)] in state_dict order, under DistributedDataParallel's prefix."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    params = dict(model.named_parameters())
    rows = []
    for key, value in model.state_dict(keep_vars=True).items():
        kind = "param %d" % index[id(params[key])] if key in params else "buffer"
        dtype = str(value.dtype).replace("torch.", "")
        rows.append(("module." + key, ",".join(str(d) for d in value.shape), dtype, kind))
    return rows


def write(out_dir, name, rows):
    with open(os.path.join(out_dir, name + ".tsv"), "w") as f:
        for line in HEADERS[name]:
            f.write("# " + line + "\n")
        f.write("# Written by tools/gen_official_layout.py. key<TAB>shape (empty: a scalar)<TAB>dtype<TAB>param N | buffer\n")
        for row in rows:
            f.write("\t".join(row) + "\n")


def main(moco_dir, moco_v3_dir, timm_dir, out_dir):
    import torchvision

    # Both repositories name their package `moco`: one at a time.
    sys.path.insert(0, moco_dir)
    import moco.builder as v2_builder

    write(out_dir, "moco_v2_resnet50",
          layout(v2_builder.MoCo(torchvision.models.resnet50, 128, 65536, 0.999, 0.2, True)))
    sys.path.remove(moco_dir)
    for module in [m for m in sys.modules if m == "moco" or m.startswith("moco.")]:
        del sys.modules[module]

    sys.path[:0] = [moco_v3_dir, timm_dir]
    import moco.builder as v3_builder
    import vits

    resnet = functools.partial(torchvision.models.resnet50, zero_init_residual=True)
    write(out_dir, "moco_v3_resnet50", layout(v3_builder.MoCo_ResNet(resnet, 256, 4096, 1.0)))
    vit = functools.partial(vits.vit_small, stop_grad_conv1=False)
    write(out_dir, "moco_v3_vit_small", layout(v3_builder.MoCo_ViT(vit, 256, 4096, 1.0)))


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:4], sys.argv[4] if len(sys.argv) == 5 else "tests/fixtures/official_layout")
