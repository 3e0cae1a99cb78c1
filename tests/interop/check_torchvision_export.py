"""Loads a `moco_ckpt export` file into torchvision and compares pooled features with the C++ model's.

Usage: /usr/bin/python3 check_torchvision_export.py EXPORT.h5 IO.h5 resnet18|resnet50
IO.h5 holds `input` [n, 3, H, W] and the C++ `features` [n, d] of the same backbone in eval mode.
Exit 0 when every key but fc loads with strict shapes and both the C++ features and torchvision's
fp32 ones are within the bound below of torchvision's in float64.

The bound is fp32's rounding of this forward pass, simulated on it in float64 (Monte Carlo
arithmetic) RUNS times: each convolution's output gets u xi conv(|x|, |w|) (u = 2^-24, xi uniform in
[-1, 1] per element and run: one rounding of a sum of terms whose absolute values sum to that), each
BatchNorm's, residual sum's and pooling's output u xi |itself|. The features may be off from float64
by FACTOR x the larger of that element's largest deviation over the runs and the RMS deviation of
all features (the runs are few), plus 4 u |feature|. In eval mode the network is continuous, so
which side of a ReLU's kink a rounding falls on moves the features by no more than the rounding.
(A 1% error in one BatchNorm's running_var of the last block moves the features by ~0.7: far out.)
"""
import copy
import sys

import h5py
import torch
import torch.nn.functional as F
import torchvision

U, RUNS, FACTOR = 2.0 ** -24, 4, 8.0

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
    expected = torch.as_tensor(f["features"][()]).double()
torch.set_num_threads(1)


def simulated_fp32(net, generator):
    """net (float64) with each operation's output rounded as fp32 would (the module's docstring)."""
    def noise(size):
        return U * size * (torch.rand(size.shape, dtype=size.dtype, generator=generator) * 2 - 1)

    def conv(m, inputs, out):
        return out + noise(F.conv2d(inputs[0].abs(), m.weight.abs(), None, m.stride, m.padding, m.dilation, m.groups))

    def elementwise(m, inputs, out):
        return out + noise(2 * out.abs())

    for m in net.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(conv)
        elif isinstance(m, (torch.nn.BatchNorm2d, torch.nn.AdaptiveAvgPool2d, torchvision.models.resnet.BasicBlock,
                            torchvision.models.resnet.Bottleneck)):
            m.register_forward_hook(elementwise)
    return net


with torch.no_grad():
    got = model(x).double()
    model64 = copy.deepcopy(model).double()
    reference = model64(x.double())
    runs = [simulated_fp32(copy.deepcopy(model64), torch.Generator().manual_seed(run))(x.double()) for run in range(RUNS)]
deviations = torch.stack([(r - reference).abs() for r in runs])
bound = FACTOR * torch.maximum(deviations.max(0).values, deviations.square().mean().sqrt()) + 4 * U * reference.abs()
ratios = {side: ((value - reference).abs() / bound).max().item() for side, value in (("C++", expected), ("torchvision fp32", got))}
print(f"{arch}: {len(state_dict)} tensors loaded, features {tuple(got.shape)} up to {reference.abs().max().item():.3g}; "
      f"largest |error| / bound against float64 torchvision: "
      + ", ".join(f"{side} {ratio:.2f}" for side, ratio in ratios.items())
      + f" (bound up to {bound.max().item():.2e})")
sys.exit(0 if all(ratio <= 1.0 for ratio in ratios.values()) else 1)
