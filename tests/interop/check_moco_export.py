"""Checks `moco_ckpt export RUN OUT --format moco` against the run's checkpoint and the official scripts.

Usage: /usr/bin/python3 check_moco_export.py EXPORT CHECKPOINT METRICS BACKBONE_H5 [DETECTRON2_PTH]
EXPORT: the --format moco file; CHECKPOINT: the checkpoint folder it was made from (step_N); METRICS:
the run's metrics.jsonl; BACKBONE_H5: `moco_ckpt export` of the same checkpoint (the query encoder's
backbone, no head); DETECTRON2_PTH (v1/v2): its --format detectron2 export. Exit 0 when
- EXPORT's pickle names no global but the tensors' (torch.load with weights_only=True takes it);
- EXPORT is what main_moco.py's save_checkpoint writes: {epoch, arch, state_dict, optimizer} (and
  scaler, a fresh GradScaler's, for MoCo v3); epoch the whole epochs done, arch the run's;
- state_dict holds every model tensor of CHECKPOINT bit for bit (dtype, shape, values) under the
  DistributedDataParallel names of the official builders, and nothing else: module.encoder_q.*,
  module.encoder_k.*, module.queue [dim, K] and module.queue_ptr (int64 [1]) for v1/v2;
  module.base_encoder.*, module.momentum_encoder.*, module.predictor.* for v3;
- a model of the official builders' layout (torchvision's ResNet; for a ViT the parameter order of
  tests/fixtures/official_layout/moco_v3_vit_small.tsv) takes state_dict with strict=True, and the official
  optimizer (torch.optim.SGD, moco-v3's LARS, torch.optim.AdamW) over its model.parameters() takes
  `optimizer` (main_moco.py --resume), every state then on the parameter whose state it is in
  CHECKPOINT, the parameters without gradient without state, the group's lr the run's last logged lr;
- main_lincls.py --pretrained's renaming (moco's for v1/v2, moco-v3's for v3) loads into the backbone
  with only the linear head missing and the backbone bitwise BACKBONE_H5 (moco-v3's sanity check);
- detection/convert-pretrain-to-detectron2.py's renaming (v1/v2) gives DETECTRON2_PTH's model, and
  moco-v3's convert_to_deit.py's (ViT) gives BACKBONE_H5's tensors.
The official scripts' steps are written out again below from their documented behaviour.
"""
import json
import math
import os
import pickletools
import sys
import zipfile

import h5py
import torch
import torch.nn as nn
import torchvision
import yaml

export_path, checkpoint_dir, metrics_path, backbone_h5 = sys.argv[1:5]
detectron2_path = sys.argv[5] if len(sys.argv) > 5 else None
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "official_layout")


def fail(message):
    sys.exit("FAIL: " + message)


def check(condition, message):
    if not condition:
        fail(message)


def read_checkpoint(folder):
    """{name: tensor} of a moco_dist checkpoint (rank 0's copy of a rank-local tensor), its manifest."""
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    tensors = {}
    for record in manifest["tensors"]:
        if record["rank_local"] and record["shard"] != 0:
            continue
        shard = "shard-%d-of-%d.h5" % (record["shard"], manifest["world_size"])
        with h5py.File(os.path.join(folder, shard), "r") as f:
            tensors[record["name"]] = torch.as_tensor(f[record["name"]][()])
    return tensors, manifest


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {k: torch.as_tensor(f[k][()]) for k in f}


def same(got, expected, what):
    check(isinstance(got, torch.Tensor), "%s is a %s, not a tensor" % (what, type(got).__name__))
    check(got.dtype == expected.dtype and got.shape == expected.shape,
          "%s: %s %s, expected %s %s" % (what, got.dtype, tuple(got.shape), expected.dtype, tuple(expected.shape)))
    check(torch.equal(got, expected), "%s: values differ" % what)


ours, manifest = read_checkpoint(checkpoint_dir)
config = yaml.safe_load(manifest["config_yaml"])
v3 = config["model"]["method"] == "v3"
arch = config["model"]["arch"]
vit = arch.startswith("vit")
optimizer_kind = config["optim"]["optimizer"]
exported = torch.load(export_path, map_location="cpu")

# --- the pickle names no global but the tensors' (torch >= 2.6's weights_only=True takes it) ------
ALLOWED = {("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict")}
with zipfile.ZipFile(export_path) as archive:
    pickled = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
for opcode, argument, _ in pickletools.genops(pickled):
    if opcode.name == "GLOBAL":
        module, name = argument.split(" ")
        check((module, name) in ALLOWED or (module == "torch" and name.endswith("Storage")),
              "the pickle names the global %s.%s, which torch.load refuses under weights_only=True" % (module, name))

# --- save_checkpoint's dict ---------------------------------------------------------------------
top = ["epoch", "arch", "state_dict", "optimizer"] + (["scaler"] if v3 else [])
check(type(exported) is dict and list(exported) == top, "keys %s, expected %s" % (list(exported), top))
check(exported["epoch"] == int(ours["progress/epoch"]) and type(exported["epoch"]) is int,
      "epoch %r, expected the %d whole epochs done" % (exported["epoch"], int(ours["progress/epoch"])))
check(exported["arch"] == arch, "arch %r, expected %r" % (exported["arch"], arch))
if v3:
    fresh = {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 0}
    check(exported["scaler"] == fresh, "scaler %r, expected a fresh GradScaler's %r" % (exported["scaler"], fresh))

# --- state_dict: our names under the official builders' ------------------------------------------
OFFICIAL = {"encoder_q/": "module.base_encoder.", "encoder_k/": "module.momentum_encoder.",
            "predictor/": "module.predictor."} if v3 else \
           {"encoder_q/": "module.encoder_q.", "encoder_k/": "module.encoder_k.", "moco/queue": "module.queue",
            "moco/queue_ptr": "module.queue_ptr"}
expected_state = {}
for name, tensor in ours.items():
    for prefix, official in OFFICIAL.items():
        if name.startswith(prefix):
            expected_state[official + name[len(prefix):]] = tensor
state_dict = exported["state_dict"]
check(sorted(state_dict) == sorted(expected_state),
      "state_dict names differ: %s" % sorted(set(state_dict) ^ set(expected_state)))
for key, tensor in expected_state.items():
    same(state_dict[key], tensor, "state_dict[%s]" % key)
if not v3:
    dim, K = config["model"]["dim"], config["moco"]["queue_size"]
    check(state_dict["module.queue"].shape == (dim, K), "queue %s, expected [dim, K]" % (tuple(state_dict["module.queue"].shape),))
    check(state_dict["module.queue_ptr"].dtype == torch.int64 and state_dict["module.queue_ptr"].shape == (1,),
          "queue_ptr is not a long [1]")


def ours_of(official_key):
    for prefix, official in OFFICIAL.items():
        if official_key.startswith(official):
            return prefix + official_key[len(official):]
    fail("no tensor of ours for " + official_key)


# --- the official model and optimizer (main_moco.py --resume) ------------------------------------
def mlp(layers, in_dim, hidden, out_dim, last_bn):
    """moco-v3 builder.py's _build_mlp layout: Linear without bias, then BN and ReLU between layers;
    a BN without affine after the last one when last_bn."""
    modules = []
    for layer in range(layers):
        last = layer == layers - 1
        width = out_dim if last else hidden
        modules.append(nn.Linear(in_dim if layer == 0 else hidden, width, bias=False))
        if not last:
            modules += [nn.BatchNorm1d(width), nn.ReLU(inplace=True)]
        elif last_bn:
            modules.append(nn.BatchNorm1d(width, affine=False))
    return nn.Sequential(*modules)


def official_resnet_model():
    """builder.py's module tree under DistributedDataParallel's `module` (the parameter order is
    what optimizer.state_dict() counts)."""
    moco = nn.Module()
    if v3:
        c3 = config["v3"]
        for name in ("base_encoder", "momentum_encoder"):
            encoder = getattr(torchvision.models, arch)(num_classes=c3["mlp_dim"], zero_init_residual=True)
            encoder.fc = mlp(c3["projector_layers"], encoder.fc.weight.shape[1], c3["mlp_dim"], config["model"]["dim"], True)
            setattr(moco, name, encoder)
        moco.predictor = mlp(c3["predictor_layers"], config["model"]["dim"], c3["mlp_dim"], config["model"]["dim"], False)
    else:
        for name in ("encoder_q", "encoder_k"):
            encoder = getattr(torchvision.models, arch)(num_classes=config["model"]["dim"])
            if config["model"]["mlp"]:
                hidden = encoder.fc.weight.shape[1]
                encoder.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), encoder.fc)
            setattr(moco, name, encoder)
        moco.register_buffer("queue", torch.zeros(config["model"]["dim"], config["moco"]["queue_size"]))
        moco.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
    ddp = nn.Module()
    ddp.module = moco
    ddp.load_state_dict(state_dict, strict=True)  # every key, every shape
    return list(ddp.named_parameters())


def official_vit_parameters():
    """The official ViT's parameters in model.parameters() order (the vit_small list's, its blocks
    cut to this ViT's depth), each holding the export's tensor."""
    depth = len({k.split(".")[3] for k in state_dict if k.startswith("module.base_encoder.blocks.")})
    names = []
    with open(os.path.join(DATA, "moco_v3_vit_small.tsv")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            key, _, _, kind = line.rstrip("\n").split("\t")
            parts = key.split(".")
            if kind.startswith("param") and not (parts[2] == "blocks" and int(parts[3]) >= depth):
                names.append((int(kind.split()[1]), key))
    names = [key for _, key in sorted(names)]
    params = {k for k in state_dict if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}
    check(set(names) == params, "the ViT's parameters are not the official ones: %s" % sorted(set(names) ^ params))
    return [(key, nn.Parameter(state_dict[key].clone())) for key in names]


def trains(official_key):
    """The official optimizer updates it: the query encoder and the predictor, but no parameter without
    gradient (a ViT's fixed pos_embed; its patch projection under --stop-grad-conv1)."""
    if not official_key.startswith(("module.encoder_q.", "module.base_encoder.", "module.predictor.")):
        return False
    frozen = [".pos_embed"] + ([".patch_embed.proj."] if v3 and config["v3"]["stop_grad_conv1"] else [])
    return not (vit and any(f in official_key for f in frozen))


parameters = official_vit_parameters() if vit else official_resnet_model()
tensors = [p for _, p in parameters]
last_lr = [r for r in map(json.loads, open(metrics_path)) if r["event"] == "train"][-1]["lr"]
# float(): PyYAML reads a number such as 1e-06 (no dot) as a string.
hyper = dict(lr=last_lr, momentum=float(config["optim"]["momentum"]), weight_decay=float(config["optim"]["weight_decay"]))
if optimizer_kind == "sgd":
    optimizer, state_keys = torch.optim.SGD(tensors, **hyper), {"momentum_buffer": "momentum_buffer"}
elif optimizer_kind == "lars":  # moco-v3's moco/optimizer.py: its defaults, state `mu`
    optimizer = torch.optim.Optimizer(tensors, dict(trust_coefficient=0.001, **hyper))
    state_keys = {"mu": "momentum_buffer"}
else:
    del hyper["momentum"]
    optimizer, state_keys = torch.optim.AdamW(tensors, **hyper), {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}
group = exported["optimizer"]["param_groups"]
check(len(group) == 1 and group[0]["params"] == list(range(len(tensors))), "param_groups: not one group of every parameter")
# The official optimizers' defaults beside the run's hyper-parameters: what their state_dict() holds.
defaults = {"sgd": dict(dampening=0.0, nesterov=False), "lars": dict(trust_coefficient=0.001),
            "adamw": dict(betas=(0.9, 0.999), eps=1e-8, amsgrad=False)}[optimizer_kind]
expected_group = dict(hyper, params=group[0]["params"], **defaults)
check(sorted(group[0]) == sorted(expected_group), "param_groups[0] keys %s, expected %s" % (sorted(group[0]), sorted(expected_group)))
for key, value in expected_group.items():
    got = group[0][key]
    check(type(got) is type(value) and (got == value or (isinstance(value, float) and math.isclose(got, value, rel_tol=1e-12))),
          "param_groups[0][%s] %r, expected %r" % (key, got, value))
optimizer.load_state_dict(exported["optimizer"])
steps = 0
for official_key, p in parameters:
    state = optimizer.state.get(p, {})
    if not trains(official_key):
        check(not state, "%s gets no gradient in the official model but has optimizer state %s" % (official_key, list(state)))
        continue
    name = ours_of(official_key)[0 if v3 else len("encoder_q/"):]
    expected_keys = set(state_keys) | ({"step"} if optimizer_kind == "adamw" else set())
    check(set(state) == expected_keys, "%s: state %s, expected %s" % (official_key, sorted(state), sorted(expected_keys)))
    for official, ours_state in state_keys.items():
        same(state[official], ours["optimizer/%s/%s" % (ours_state, name)], "%s's %s" % (official_key, official))
    if optimizer_kind == "adamw":
        steps = int(ours["optimizer/steps"])
        same(state["step"], torch.tensor(float(steps)), "%s's step" % official_key)
        p.grad = torch.zeros_like(p)
if optimizer_kind == "adamw":  # the resumed AdamW steps on: each parameter's count its own
    optimizer.step()
    check(all(int(optimizer.state[p]["step"]) == steps + 1 for k, p in parameters if trains(k)), "AdamW's steps are shared")
elif optimizer_kind == "sgd":
    for k, p in parameters:
        p.grad = torch.zeros_like(p) if trains(k) else None
    optimizer.step()

# --- main_lincls.py --pretrained, moco-v3's sanity check ----------------------------------------
backbone = read_h5(backbone_h5)
head = "head" if vit else "fc"
source = "module.base_encoder" if v3 else "module.encoder_q"
pretrained = dict(torch.load(export_path, map_location="cpu")["state_dict"])
for k in list(pretrained):
    if k.startswith(source) and not k.startswith("%s.%s" % (source, head)):
        pretrained[k[len(source) + 1:]] = pretrained[k]
    del pretrained[k]
if vit:  # no timm here: the backbone's keys (BACKBONE_H5) and the new head are the model's
    model_keys = set(backbone) | {"head.weight", "head.bias"}
    missing, unexpected = model_keys - set(pretrained), set(pretrained) - model_keys
    for k in set(pretrained) & set(backbone):
        check(pretrained[k].shape == backbone[k].shape, "main_lincls.py: %s's shape" % k)
else:
    model = getattr(torchvision.models, arch)()
    missing, unexpected = model.load_state_dict(pretrained, strict=False)
check(set(missing) == {head + ".weight", head + ".bias"}, "main_lincls.py: missing %s" % sorted(missing))
check(not unexpected, "main_lincls.py: unexpected %s" % sorted(unexpected))
for k, tensor in backbone.items():
    same(pretrained[k], tensor, "main_lincls.py's backbone " + k)
    same(state_dict["%s.%s" % (source, k)], tensor, "sanity check of " + k)

# --- the converters ----------------------------------------------------------------------------
if detectron2_path:  # detection/convert-pretrain-to-detectron2.py
    converted = {}
    for k, v in state_dict.items():
        if not k.startswith("module.encoder_q."):
            continue
        k = k.replace("module.encoder_q.", "")
        if "layer" not in k:
            k = "stem." + k
        for old, new in [("layer%d" % t, "res%d" % (t + 1)) for t in (1, 2, 3, 4)] + \
                        [("bn%d" % t, "conv%d.norm" % t) for t in (1, 2, 3)] + \
                        [("downsample.0", "shortcut"), ("downsample.1", "shortcut.norm")]:
            k = k.replace(old, new)
        converted[k] = v
    d2 = torch.load(detectron2_path, map_location="cpu")
    check(sorted(d2["model"]) == sorted(converted), "detectron2: names differ from the converter's")
    for k, v in converted.items():
        same(d2["model"][k], v, "detectron2 " + k)
if vit:  # convert_to_deit.py: base_encoder without its head, for DeiT's timm model
    deit = {k[len("module.base_encoder."):]: v for k, v in state_dict.items()
            if k.startswith("module.base_encoder") and not k.startswith("module.base_encoder.head")}
    check(sorted(deit) == sorted(backbone), "convert_to_deit.py: %s" % sorted(set(deit) ^ set(backbone)))
    for k, v in backbone.items():
        same(deit[k], v, "convert_to_deit.py " + k)

print("%s %s (%s): epoch %d, %d state_dict tensors, %d optimizer states at the official indices, lr %.6g; "
      "main_lincls.py keeps every backbone tensor%s" % (
          "MoCo v3" if v3 else "MoCo v1/v2", arch, optimizer_kind, exported["epoch"], len(state_dict),
          len(exported["optimizer"]["state"]), last_lr,
          "; detectron2's converter" if detectron2_path else "; convert_to_deit.py" if vit else ""))
