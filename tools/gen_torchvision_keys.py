#!/usr/bin/python3
"""Writes torchvision's ResNet state_dict keys and shapes as test data for tests/model/resnet_test.cpp.

Run with Debian's python3-torchvision: /usr/bin/python3 tools/gen_torchvision_keys.py tests/fixtures
Each line: key<TAB>comma-separated shape. The *_mlp files replace fc by MoCo v2's
Linear(h,h) -> ReLU -> Linear(h,128) exactly as the reference implementation does.
torchvision_zero_init_residual.tsv: arch<TAB>key for each tensor that zero_init_residual=True zeroes
(built twice from one seed: the keys whose values differ, each checked to be all zeros).
"""
import os
import sys

import torch
import torch.nn as nn
import torchvision


def write(model, path):
    with open(path, "w") as f:
        for key, value in model.state_dict().items():
            f.write("%s\t%s\n" % (key, ",".join(str(d) for d in value.shape)))


def zero_init_residual_keys(arch):
    torch.manual_seed(0)
    plain = getattr(torchvision.models, arch)().state_dict()
    torch.manual_seed(0)
    zeroed = getattr(torchvision.models, arch)(zero_init_residual=True).state_dict()
    keys = [k for k in plain if not torch.equal(plain[k], zeroed[k])]
    assert keys and all(not zeroed[k].any() for k in keys), keys
    return keys


def main(out_dir):
    with open(os.path.join(out_dir, "torchvision_zero_init_residual.tsv"), "w") as f:
        for arch in ("resnet18", "resnet34", "resnet50"):
            f.writelines("%s\t%s\n" % (arch, key) for key in zero_init_residual_keys(arch))
    for arch in ("resnet18", "resnet34", "resnet50"):
        model = getattr(torchvision.models, arch)()
        write(model, os.path.join(out_dir, "torchvision_%s.tsv" % arch))
        hidden = model.fc.weight.shape[1]
        model = getattr(torchvision.models, arch)(num_classes=128)
        model.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), model.fc)
        write(model, os.path.join(out_dir, "torchvision_%s_mlp.tsv" % arch))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures")
