#!/usr/bin/python3
"""A PyTorch peer of the README's main job (issue 23).

Trains the same MoCo v2 recipe as `build/moco_dist --config configs/fashion_mnist_quick.yaml`
(same model, loss, optimizer, schedule, augmentation and kNN monitor; not the same bits, since
the random number streams differ) and reports the same three kNN top-1 numbers. A C++ result
clearly below this one at equal steps points at a bug in the C++.

Run with Debian's /usr/bin/python3 (torch 1.13 CPU):
  /usr/bin/python3 tools/peer_main_job.py --config configs/fashion_mnist_quick.yaml \
      train.epochs=0.05 train.time_budget_s=0 --json /tmp/peer.json
Overrides are `key=value` with moco_dist's dotted names, so one override list drives both.
"""
import argparse
import gzip
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

# moco_dist's defaults (src/run/config.cpp, see `build/moco_dist --help`) for the keys this peer
# uses; the YAML and the command line override them in that order, as in moco_dist.
DEFAULTS = {
    "model": {"arch": "resnet_tiny", "small_stem": True, "stem_stride": 1, "width": 0.0, "dim": 128,
              "mlp": False},
    "moco": {"queue_size": 65536, "momentum": 0.999, "temperature": 0.07, "bn_splits": 8},
    "data": {"dataset": "fashion_mnist", "root": "/usr/share/datasets/fashion-mnist", "image_size": 28,
             "augmentation": "simple", "crop_scale_min": 0.2, "flip_prob": 0.5, "jitter_prob": 0.8,
             "brightness": 0.4, "contrast": 0.4, "mean": [0.286], "std": [0.353]},
    "optim": {"base_lr": 0.03, "batch_size": 256, "momentum": 0.9, "weight_decay": 1e-4, "schedule": "step",
              "milestones": [120, 160], "gamma": 0.1},
    "train": {"epochs": 200.0, "time_budget_s": 0.0, "seed": 0, "log_every": 50, "threads": 0},
    "knn": {"k": 200, "temperature": 0.1, "batch_size": 512, "memory_size": 0, "query_size": 0},
}
# Keys moco_dist has but that do not change this recipe's math on one CPU rank: accepted and
# ignored, so the same override list can be passed to both programs.
IGNORED_SECTIONS = {"ckpt", "dist", "debug", "lincls"}
IGNORED_KEYS = {"train.output_dir", "train.resume", "train.tensorboard", "train.max_bad_steps",
                "train.stop_at_step", "train.precision", "train.channels_last", "train.cudnn_benchmark",
                "model.pretrained", "data.workers", "data.prefetch", "knn.every_epochs", "knn.raw_baseline"}


def load_config(path, overrides):
    cfg = {s: dict(v) for s, v in DEFAULTS.items()}

    def put(key, value):
        section, _, name = key.partition(".")
        if section in IGNORED_SECTIONS or key in IGNORED_KEYS:
            return
        if section not in cfg or name not in cfg[section]:
            sys.exit(f"peer_main_job: unknown or unsupported key '{key}'")
        cfg[section][name] = value

    with open(path) as f:
        for section, values in (yaml.safe_load(f) or {}).items():
            for name, value in (values or {}).items():
                put(f"{section}.{name}", value)
    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq:
            sys.exit(f"peer_main_job: override '{item}' is not key=value")
        put(key, yaml.safe_load(value))  # YAML scalars, as moco_dist parses them
    # Only the recipe moco_dist's main job uses is re-implemented here.
    if cfg["data"]["dataset"] not in ("fashion_mnist", "mnist") or cfg["data"]["augmentation"] != "simple":
        sys.exit("peer_main_job: only data.dataset fashion_mnist/mnist with data.augmentation simple")
    if cfg["model"]["arch"] != "resnet_tiny":
        sys.exit("peer_main_job: only model.arch resnet_tiny")
    return cfg


# ---------------------------------------------------------------- data (src/data/idx.cpp, augment.cpp)
def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]  # magic: 0, 0, type (0x08 = uint8), number of dimensions
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_split(root, prefix):
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def normalize(images_u8, d):
    """uint8 -> (x/255 - mean)/std, as data::normalize_batch."""
    mean = torch.tensor(d["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(d["std"], dtype=torch.float32).view(1, -1, 1, 1)
    return (images_u8.float() / 255.0 - mean) / std


def crop_box(rng, h, w, d):
    """torchvision's RandomResizedCrop.get_params, as src/data/view_params.cpp (scale [min, 1], ratio 3/4..4/3)."""
    area = h * w
    for _ in range(10):
        target = area * rng.uniform(d["crop_scale_min"], 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))  # round: half-even, as C++
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw
    return 0, 0, h, w  # square images: the centre fallback is the whole image


def augment(images_u8, rng, d):
    """The 'simple' recipe batched as in augment_batch: one affine grid_sample does crop, resize and
    flip (bilinear, border padding, align_corners=False), then brightness and contrast (each clamped
    to [0, 1], torchvision's order) with probability jitter_prob, then mean/std."""
    n, c, h, w = images_u8.shape
    size = d["image_size"]
    theta = torch.zeros(n, 2, 3)
    bright, contrast = torch.ones(n, 1, 1, 1), torch.ones(n, 1, 1, 1)
    for i in range(n):  # per-sample draws in augment.cpp's order: crop, flip, jitter gate, factors
        top, left, ch, cw = crop_box(rng, h, w, d)
        flip = rng.random() < d["flip_prob"]
        if rng.random() < d["jitter_prob"]:
            bright[i] = rng.uniform(max(0.0, 1 - d["brightness"]), 1 + d["brightness"])
            contrast[i] = rng.uniform(max(0.0, 1 - d["contrast"]), 1 + d["contrast"])
        theta[i, 0, 0] = -cw / w if flip else cw / w
        theta[i, 0, 2] = (2 * left + cw) / w - 1
        theta[i, 1, 1] = ch / h
        theta[i, 1, 2] = (2 * top + ch) / h - 1
    grid = F.affine_grid(theta, [n, c, size, size], align_corners=False)
    x = F.grid_sample(images_u8.float() / 255.0, grid, mode="bilinear", padding_mode="border", align_corners=False)
    x = (x * bright).clamp(0, 1)
    anchor = x.mean(dim=(1, 2, 3), keepdim=True)  # greyscale mean: the contrast anchor (1 channel)
    x = (contrast * x + (1 - contrast) * anchor).clamp(0, 1)
    mean = torch.tensor(d["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(d["std"]).view(1, -1, 1, 1)
    return (x - mean) / std


# ---------------------------------------------------------------- model (src/model/)
class SplitBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm over `splits` contiguous groups of the batch (src/model/split_batchnorm.cpp): on one
    rank moco.bn_splits=8 gives each group of 16 its own statistics, so shuffle-BN is not a no-op.
    The running statistics become the mean of the groups' updates."""

    def __init__(self, channels, splits):
        super().__init__(channels)
        self.splits = splits

    def forward(self, x):
        if not self.training or self.splits == 1:
            return super().forward(x)
        self.num_batches_tracked.add_(1)
        n, c, h, w = x.shape
        g = self.splits
        wide = x.view(g, n // g, c, h, w).transpose(0, 1).reshape(n // g, g * c, h, w)
        mean, var = self.running_mean.repeat(g), self.running_var.repeat(g)
        out = F.batch_norm(wide, mean, var, self.weight.repeat(g), self.bias.repeat(g), True, self.momentum, self.eps)
        with torch.no_grad():
            self.running_mean.copy_(mean.view(g, c).mean(0))
            self.running_var.copy_(var.view(g, c).mean(0))
        return out.view(n // g, g, c, h, w).transpose(0, 1).reshape(n, c, h, w)


def conv(cin, cout, k, stride):
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride, splits):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, planes, 3, stride), SplitBatchNorm2d(planes, splits)
        self.conv2, self.bn2 = conv(planes, planes, 3, 1), SplitBatchNorm2d(planes, splits)
        self.downsample = (nn.Sequential(conv(cin, planes, 1, stride), SplitBatchNorm2d(planes, splits))
                           if stride != 1 or cin != planes else None)

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNetTiny(nn.Module):
    """resnet_tiny of src/model/resnet.cpp: BasicBlock [1,1,1,1], width 0.5 (model.width overrides),
    small stem (3x3, stride model.stem_stride, no max-pool), MLP or linear head."""

    def __init__(self, m, splits, in_channels=1):
        super().__init__()
        width = m["width"] if m["width"] > 0 else 0.5
        scaled = lambda ch: max(1, int(ch * width + 0.5))
        stem = scaled(64)
        self.small_stem = m["small_stem"]
        self.conv1 = conv(in_channels, stem, 3, m["stem_stride"]) if self.small_stem else conv(in_channels, stem, 7, 2)
        self.bn1 = SplitBatchNorm2d(stem, splits)
        cin, stages = stem, []
        for s, stride in enumerate((1, 2, 2, 2)):
            stages.append(BasicBlock(cin, scaled(64 << s), stride, splits))
            cin = scaled(64 << s)
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = (nn.Sequential(nn.Linear(cin, cin), nn.ReLU(), nn.Linear(cin, m["dim"])) if m["mlp"]
                   else nn.Linear(cin, m["dim"]))  # PyTorch's default Linear init = LibTorch's
        for mod in self.modules():  # He (fan_out) for convolutions; BN starts at 1, 0
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")

    def features(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        if not self.small_stem:
            y = F.max_pool2d(y, 3, 2, 1)
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        return F.adaptive_avg_pool2d(y, 1).flatten(1)

    def forward(self, x):
        return self.fc(self.features(x))


class Moco(nn.Module):
    """MoCo v2 as src/moco_v2/moco.cpp on one rank."""

    def __init__(self, cfg):
        super().__init__()
        mc = cfg["moco"]
        torch.manual_seed(cfg["train"]["seed"])
        self.encoder_q = ResNetTiny(cfg["model"], mc["bn_splits"])
        self.encoder_k = ResNetTiny(cfg["model"], mc["bn_splits"])
        self.encoder_k.load_state_dict(self.encoder_q.state_dict())  # parameters and BN buffers
        for p in self.encoder_k.parameters():
            p.requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(cfg["model"]["dim"], mc["queue_size"]), dim=0))
        self.ptr = 0
        self.m, self.t, self.splits = mc["momentum"], mc["temperature"], mc["bn_splits"]

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            for pk, pq in zip(self.encoder_k.parameters(), self.encoder_q.parameters()):
                pk.mul_(self.m).add_(pq, alpha=1 - self.m)  # momentum update before the keys
            if self.splits > 1:  # shuffle-BN on one device: permute keys across the BN groups
                perm = torch.randperm(im_k.shape[0])
                k = torch.empty(im_k.shape[0], q.shape[1])
                k[perm] = self.encoder_k(im_k[perm])
            else:
                k = self.encoder_k(im_k)
            k = F.normalize(k, dim=1)
        l_pos = (q * k).sum(1, keepdim=True)
        l_neg = q @ self.queue.clone()  # a copy: the enqueue below must not change the backward
        logits = torch.cat([l_pos, l_neg], 1) / self.t
        loss = F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long))
        acc1 = (l_neg.detach() <= l_pos.detach()).all(1).float().mean().item() * 100  # positive ranked first
        with torch.no_grad():  # enqueue, wrapping around (the queue need not be a multiple of the batch)
            cols = (torch.arange(k.shape[0]) + self.ptr) % self.queue.shape[1]
            self.queue[:, cols] = k.t()
            self.ptr = (self.ptr + k.shape[0]) % self.queue.shape[1]
        return loss, acc1


# ---------------------------------------------------------------- kNN monitor (src/eval/knn.cpp)
@torch.no_grad()
def knn_top1(featurize, train, test, kn, d):
    def extract(split, limit):
        images, labels = split
        n = min(limit, len(images)) if limit > 0 else len(images)
        feats = [featurize(normalize(images[s:s + kn["batch_size"]], d)) for s in range(0, n, kn["batch_size"])]
        return F.normalize(torch.cat(feats)[:n].flatten(1), dim=1), labels[:n]

    memory, memory_labels = extract(train, kn["memory_size"])
    queries, query_labels = extract(test, kn["query_size"])
    k = min(kn["k"], len(memory))
    sim, idx = (queries @ memory.t()).topk(k, dim=1)
    votes = torch.zeros(len(queries), 10).scatter_add_(1, memory_labels[idx], (sim / kn["temperature"]).exp())
    return 100.0 * (votes.argmax(1) == query_labels).float().mean().item()


def encoder_top1(encoder, train, test, cfg):
    was = encoder.training
    encoder.eval()  # backbone features (avg-pool output, before the head) with running BN statistics
    top1 = knn_top1(encoder.features, train, test, cfg["knn"], cfg["data"])
    encoder.train(was)
    return top1


# ---------------------------------------------------------------- training (src/train/)
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", "-c", required=True)
    ap.add_argument("--json", help="write the three kNN numbers (and steps, steps/s) as one JSON line here")
    ap.add_argument("overrides", nargs="*", help="key=value, moco_dist's dotted names")
    args = ap.parse_args()
    cfg = load_config(args.config, args.overrides)
    d, o, tr = cfg["data"], cfg["optim"], cfg["train"]
    torch.set_num_threads(tr["threads"] if tr["threads"] > 0 else len(os.sched_getaffinity(0)))
    train = load_split(d["root"], "train")
    test = load_split(d["root"], "t10k")

    raw = knn_top1(lambda x: x, train, test, cfg["knn"], d)  # the normalised pixels, no network
    print(f"kNN (raw pixels): top-1 {raw:.2f}%", flush=True)
    moco = Moco(cfg)
    moco.train()
    random_init = encoder_top1(moco.encoder_q, train, test, cfg)
    print(f"kNN (random_init encoder): top-1 {random_init:.2f}%", flush=True)

    # SGD with momentum and weight decay on every query parameter (BN and biases too), as run/sgd.cpp;
    # torch.optim.SGD (no dampening, no Nesterov) is the same update.
    opt = torch.optim.SGD(moco.encoder_q.parameters(), lr=0.0, momentum=o["momentum"], weight_decay=o["weight_decay"])
    peak = o["base_lr"] * o["batch_size"] / 256.0
    steps_per_epoch = len(train[0]) // o["batch_size"]  # drop_last, as data::epoch_order
    total = math.ceil(tr["epochs"] * steps_per_epoch)
    rng = random.Random(tr["seed"])  # data order and views: another stream than the C++ hash seeds
    budget = tr["time_budget_s"]

    def lr_at(step, seconds):  # train/schedule.cpp with run_control's progress (the step about to run)
        p = step / total
        if budget > 0:
            p = max(p, seconds / budget)
        epoch = p * tr["epochs"]
        if o["schedule"] == "cosine":
            return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, max(0.0, epoch / tr["epochs"]))))
        return peak * o["gamma"] ** sum(epoch >= mst for mst in o["milestones"])

    step, seconds, loss_sum, acc_sum, logged = 0, 0.0, 0.0, 0.0, 0
    done = total <= 0
    epoch = 0
    while not done:
        order = list(range(len(train[0])))
        rng.shuffle(order)
        for b in range(steps_per_epoch):
            start = time.perf_counter()
            idx = torch.tensor(order[b * o["batch_size"]:(b + 1) * o["batch_size"]])
            images = train[0][idx]
            im_q, im_k = augment(images, rng, d), augment(images, rng, d)
            lr = lr_at(step, seconds)
            for g in opt.param_groups:
                g["lr"] = lr
            loss, acc1 = moco(im_q, im_k)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            seconds += time.perf_counter() - start
            loss_sum, acc_sum, logged = loss_sum + loss.item(), acc_sum + acc1, logged + 1
            done = step >= total or (budget > 0 and seconds >= budget)
            if step % tr["log_every"] == 0 or done:
                print(f"epoch {step / steps_per_epoch:.2f} step {step}/{total} loss {loss_sum / logged:.4f} "
                      f"acc@1 {acc_sum / logged:.1f}% lr {lr:.4g} {step / seconds:.2f} steps/s", flush=True)
                loss_sum, acc_sum, logged = 0.0, 0.0, 0
            if done:
                break
        epoch += 1

    trained = encoder_top1(moco.encoder_q, train, test, cfg)
    rate = step / seconds if seconds > 0 else float("nan")
    print(f"kNN top-1: raw pixels {raw:.2f}%, random init {random_init:.2f}%, trained {trained:.2f}% after {step} "
          f"steps ({trained - random_init:+.2f} points over random init), {seconds:.0f}s of training, "
          f"{rate:.3f} steps/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps({"knn_raw_pixels": raw, "knn_random_init": random_init, "knn_trained": trained,
                                "steps": step, "train_seconds": seconds, "steps_per_s": rate}) + "\n")


if __name__ == "__main__":
    main()
