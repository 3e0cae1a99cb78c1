"""Loads a `moco_ckpt export` file into torchvision and compares pooled features with the C++ model's.

Usage: /usr/bin/python3 check_torchvision_export.py EXPORT.h5 IO.h5 resnet18|resnet50
IO.h5 holds `input` [n, 3, H, W] and the C++ `features` [n, d] of the same backbone in eval mode.
Exit 0 when every key but fc loads with strict shapes and the features agree to 1e-5 of their
largest magnitude (at least 1e-4).
"""
import sys

import h5py
import torch
import torchvision

export_path, io_path, arch = sys.argv[1:4]

# docs/checkpoints.md's snippet: an export is a flat HDF5 file of state_dict keys.
with h5py.File(export_path, "r") as f:
    state_dict = {k: torch.as_tensor(f[k][()]) for k in f}

model = getattr(torchvision.models, arch)()
missing, unexpected = model.load_state_dict(state_dict, strict=False)  # shapes are checked regardless
assert not unexpected, f"keys torchvision does not have: {unexpected}"
assert all(k.startswith("fc.") for k in missing), f"backbone keys missing from the export: {missing}"
assert missing, "the export should hold no fc head"

model.fc = torch.nn.Identity()
model.eval()
with h5py.File(io_path, "r") as f:
    x = torch.as_tensor(f["input"][()])
    expected = torch.as_tensor(f["features"][()])
with torch.no_grad():
    got = model(x)
error = (got - expected).abs().max().item()
# Float32 rounding through a ResNet-50 grows with the features' size (here up to ~230), and another
# LibTorch than this torchvision's (2.x in C++, 1.13 here) sums in another order: 1.6e-4 seen. A 1%
# error in one BatchNorm's running_var of the last block moves the features by ~0.7.
tolerance = max(1e-4, 1e-5 * expected.abs().max().item())
print(f"{arch}: {len(state_dict)} tensors loaded, features {tuple(got.shape)}, "
      f"max |torchvision - C++| = {error:.3g} (tolerance {tolerance:.3g})")
sys.exit(0 if error <= tolerance else 1)
