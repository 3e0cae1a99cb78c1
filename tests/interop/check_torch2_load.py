"""Every `moco_ckpt export` torch format loads with a plain torch.load(path) in torch >= 2.6, whose
default is weights_only=True, and holds the HDF5 export's tensors bit for bit.

Usage: PYTHON check_torch2_load.py KIND FILE H5 [KIND FILE H5 ...]  (PYTHON: a torch >= 2.6 with h5py)
KIND: torch (FILE: --format torch, H5: the backbone export), detectron2 (H5: the export with
--keep-head; FILE's model is its tensors under the official converter's names), moco (FILE: --format
moco; H5: the export with --keep-head, the query encoder's tensors in FILE's state_dict).
"""
import sys

import h5py
import torch

version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
if version < (2, 6):
    sys.exit("FAIL: torch %s: its torch.load does not default to weights_only=True (2.6 and later do)" % torch.__version__)


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {k: torch.as_tensor(f[k][()]) for k in f}


def detectron2_name(key):  # detection/convert-pretrain-to-detectron2.py's renaming
    if "layer" not in key:
        key = "stem." + key
    for t in (1, 2, 3, 4):
        key = key.replace("layer%d" % t, "res%d" % (t + 1))
    for t in (1, 2, 3):
        key = key.replace("bn%d" % t, "conv%d.norm" % t)
    return key.replace("downsample.0", "shortcut").replace("downsample.1", "shortcut.norm")


def same_tensors(got, expected, what):
    assert sorted(got) == sorted(expected), "%s: names differ: %s" % (what, sorted(set(got) ^ set(expected)))
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), "%s: %s differs" % (what, k)


args = sys.argv[1:]
assert args and len(args) % 3 == 0, __doc__
for kind, path, h5 in zip(args[0::3], args[1::3], args[2::3]):
    loaded = torch.load(path)  # weights_only=True: a refused global raises here
    expected = read_h5(h5)
    if kind == "torch":
        same_tensors(loaded, expected, path)
    elif kind == "detectron2":
        assert loaded["__author__"] == "MOCO" and loaded["matching_heuristics"] is True, path
        same_tensors(loaded["model"], {detectron2_name(k): v for k, v in expected.items()}, path)
    elif kind == "moco":
        state_dict = loaded["state_dict"]
        v3 = any(k.startswith("module.base_encoder.") for k in state_dict)
        prefix = "module.base_encoder." if v3 else "module.encoder_q."
        same_tensors({k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}, expected, path)
        assert isinstance(loaded["epoch"], int) and loaded["optimizer"]["state"], path
    else:
        sys.exit("FAIL: unknown kind " + kind)
    print("torch %s: torch.load(%s) (weights_only=True by default): %s format, the HDF5 export's tensors"
          % (torch.__version__, path, kind))
