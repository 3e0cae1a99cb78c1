"""Checks `moco_ckpt export --format torch` and `--format detectron2` against the HDF5 export.

Usage: /usr/bin/python3 check_torch_exports.py BACKBONE.h5 FULL.h5 BACKBONE.pth DETECTRON2.pth IO.h5 ARCH
BACKBONE.h5 and BACKBONE.pth: exports without the fc head; FULL.h5: the same with --keep-head;
DETECTRON2.pth: the detectron2 export; IO.h5 holds an `input` [n, 3, H, W]. ARCH: resnet18|resnet50.
Exit 0 when
- the torch export is a dict with the HDF5 export's names, dtypes, shapes and values, loads into
  torchvision's ARCH with strict=True once fc is removed, and gives the HDF5 export's pooled features;
- the detectron2 export holds what facebookresearch/moco's convert-pretrain-to-detectron2.py makes of
  a `module.encoder_q.*` state dict of FULL.h5 (its renaming written out again below), as tensors.
"""
import sys

import h5py
import torch
import torchvision

backbone_h5, full_h5, torch_path, d2_path, io_path, arch = sys.argv[1:7]


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {k: torch.as_tensor(f[k][()]) for k in f}


def same_tensors(got, expected, what):
    assert sorted(got) == sorted(expected), f"{what}: names differ: {sorted(set(got) ^ set(expected))}"
    for k, v in expected.items():
        g = got[k]
        assert isinstance(g, torch.Tensor), f"{what}: {k} is a {type(g).__name__}, not a tensor"
        assert g.dtype == v.dtype and g.shape == v.shape, f"{what}: {k}: {g.dtype} {tuple(g.shape)} vs {v.dtype} {tuple(v.shape)}"
        assert torch.equal(g, v), f"{what}: {k}: values differ"


def pooled_features(state_dict, x):
    model = getattr(torchvision.models, arch)()
    model.fc = torch.nn.Identity()
    model.load_state_dict(state_dict, strict=True)  # every key, every shape: a mismatch raises
    model.eval()
    with torch.no_grad():
        return model(x)


def official_detectron2_name(moco_key):
    # The official converter's rules, in its order: only module.encoder_q.* keys, prefix removed;
    # "stem." before a key with no "layer" in it; then plain substring replacements.
    k = moco_key[len("module.encoder_q."):]
    if "layer" not in k:
        k = "stem." + k
    rules = [(f"layer{t}", f"res{t + 1}") for t in (1, 2, 3, 4)]
    rules += [(f"bn{t}", f"conv{t}.norm") for t in (1, 2, 3)]
    rules += [("downsample.0", "shortcut"), ("downsample.1", "shortcut.norm")]
    for old, new in rules:
        k = k.replace(old, new)
    return k


# --format torch: docs/checkpoints.md's snippet.
backbone = read_h5(backbone_h5)
exported = torch.load(torch_path, map_location="cpu")
assert type(exported) is dict, f"torch export: a {type(exported).__name__}, not a dict"
same_tensors(exported, backbone, "torch export")
with h5py.File(io_path, "r") as f:
    x = torch.as_tensor(f["input"][()])
from_torch, from_h5 = pooled_features(exported, x), pooled_features(backbone, x)
assert torch.equal(from_torch, from_h5), f"features differ by {(from_torch - from_h5).abs().max().item()}"

# --format detectron2, from a MoCo training checkpoint's state dict as main_moco.py saves it.
moco_state = {"module.encoder_q." + k: v for k, v in read_h5(full_h5).items()}
moco_state.update({"module.encoder_k." + k: v for k, v in read_h5(full_h5).items()})
moco_state["module.queue"] = torch.zeros(128, 4)
expected = {official_detectron2_name(k): v for k, v in moco_state.items() if k.startswith("module.encoder_q.")}
d2 = torch.load(d2_path, map_location="cpu")
assert sorted(d2) == ["__author__", "matching_heuristics", "model"], f"detectron2 export: keys {sorted(d2)}"
assert d2["__author__"] == "MOCO" and d2["matching_heuristics"] is True, {k: d2[k] for k in d2 if k != "model"}
same_tensors(d2["model"], expected, "detectron2 export")
for k in ("stem.conv1.weight", "stem.conv1.norm.num_batches_tracked", "res2.0.conv1.norm.running_var",
          "res3.0.shortcut.weight", "res3.0.shortcut.norm.running_mean", "res5.1.conv2.norm.bias"):
    assert k in d2["model"], f"detectron2 export: no {k}"
assert any(k.startswith("stem.fc.") for k in d2["model"]), "detectron2 export: the fc head is missing"
print(f"{arch}: torch export {len(exported)} tensors = HDF5 export, strict load, features {tuple(from_torch.shape)} "
      f"equal; detectron2 export {len(d2['model'])} tensors = the official converter's renaming")
