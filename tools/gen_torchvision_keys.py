#!/usr/bin/python3
"""Writes torchvision's ResNet state_dict keys and shapes as test data for tests/test_model_resnet.cpp.

Run with Debian's python3-torchvision: /usr/bin/python3 tools/gen_torchvision_keys.py tests/data
Each line: key<TAB>comma-separated shape. The *_mlp files replace fc by MoCo v2's
Linear(h,h) -> ReLU -> Linear(h,128) exactly as the reference implementation does.
"""
import os
import sys

import torch.nn as nn
import torchvision


def write(model, path):
    with open(path, "w") as f:
        for key, value in model.state_dict().items():
            f.write("%s\t%s\n" % (key, ",".join(str(d) for d in value.shape)))


def main(out_dir):
    for arch in ("resnet18", "resnet34", "resnet50"):
        model = getattr(torchvision.models, arch)()
        write(model, os.path.join(out_dir, "torchvision_%s.tsv" % arch))
        hidden = model.fc.weight.shape[1]
        model = getattr(torchvision.models, arch)(num_classes=128)
        model.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), model.fc)
        write(model, os.path.join(out_dir, "torchvision_%s_mlp.tsv" % arch))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
