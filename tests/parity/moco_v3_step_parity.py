#!/usr/bin/python3
"""MoCo v3's step in C++ against PyTorch (run with Debian's /usr/bin/python3).

Runs moco_v3_step_tool, which builds the v3 method (torchvision's resnet18 layout, small heads, LARS
or AdamW, batch 32), takes a step, then two more that it records (one with AdamW); redoes them here
from the same weights, optimizer state and views, written from the MoCo v3 paper (Chen, Xie and He,
ICCV 2021) and the official recipe as described there:
- the query encoder is a backbone whose fc is the projector (Linear without bias, BN, ReLU, Linear,
  BN without affine), then the predictor (Linear, BN, ReLU, Linear, and BN without affine where the
  run's model has predictor_last_bn: the official MoCo_ViT's, moco/builder.py line 122 with
  _build_mlp's last_bn=True of line 36; MoCo_ResNet passes False, line 109); the momentum encoder is
  a backbone with its own projector;
- m = 1 - (1 - m0) (cos(pi k / K) + 1) / 2 at step k (counted from 0) of K; the momentum encoder's
  parameters become m k + (1 - m) q before the keys are computed (train-mode BN);
- loss = ctr(q1, k2) + ctr(q2, k1), ctr(q, k) = CE(normalize(q) normalize(k)^T / T, arange(n)) * 2T;
- LARS: for weights of 2 or more dims d = g + wd p, scaled by 0.001 |p| / |d| (1 where a norm is 0);
  for 1-D ones d = g; mu = momentum mu + d; p -= lr mu. With `adamw`: torch.optim.AdamW itself.
Exit 0 when both losses and every weight and BN buffer after the steps agree within 1e-5 (integers
exactly), the optimizer's state (gradient units) within 1e-5 of its largest value, and (LARS)
each tensor's change over the two steps within 1e-3 of its largest change (+1e-7): LARS moves a
weight matrix by ~lr x 0.001 |w|, far below 1e-5, so the first bound alone would not see an error
in it. Lines name the tensors that fail. (With batch 8 the heads' BatchNorm over 8 rows is ill-conditioned: fp32 and
fp64 PyTorch then differ by 2e-2 in a gradient, so the batch is 32, where both agree within 3e-6.)

With `vit_adamw`: the backbone is a small ViT (vits.py's VisionTransformerMoCo on timm's layout, patch
4 on 32 px, dim 64, 4 blocks of 4 heads: vit_tiny_cpu), the projector of 3 layers and the predictor's
last BN (the official MoCo_ViT), stop-grad-conv1, AdamW, one
step; the fixed position embedding is also checked against vits.py's formula, and the frozen patch
projection and position embedding must come out of the step as they went in. Two parts of a ViT
have gradients that are exactly 0 in exact arithmetic (the key third of each qkv bias, the final
norm's bias); AdamW turns their rounding into steps of +-lr, so they are held to 4 lr, after their
gradients are checked to be below 1e-6 (rounding_only_elements). With `vit_lars`: the same ViT with
LARS, two steps, every element held to 1e-5 (LARS moves those parts by lr times their tiny gradient).

usage: moco_v3_step_parity.py TOOL [lars|adamw|vit_adamw|vit_lars]
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

TOLERANCE = 1e-5
# A gradient that is 0 in exact arithmetic comes out below this (~1e-8 seen), and AdamW's m / sqrt(v)
# makes of it a full step of arbitrary sign (see rounding_only_elements).
ROUNDING_GRADIENT, ADAMW_STEP_BOUND = 1e-6, 4.0
CHANGE_TOLERANCE, CHANGE_FLOOR = 1e-3, 1e-7


def read_tensors(folder, index):
    out = {}
    for name, t in index.items():
        dtype = np.int64 if t["dtype"] == "int64" else np.float32
        values = np.fromfile(os.path.join(folder, t["file"]), dtype=dtype).reshape(t["shape"])
        out[name] = torch.from_numpy(values.copy())
    return out


def mlp(layers, in_dim, hidden, out_dim, last_bn):
    modules = []
    for layer in range(layers):
        last = layer == layers - 1
        modules.append(nn.Linear(in_dim if layer == 0 else hidden, out_dim if last else hidden, bias=False))
        if not last:
            modules += [nn.BatchNorm1d(hidden), nn.ReLU()]
        elif last_bn:
            modules.append(nn.BatchNorm1d(out_dim, affine=False))
    return nn.Sequential(*modules)


class Attention(nn.Module):
    """timm's: one qkv Linear with bias, softmax(q k^T / sqrt(head dim)) v over the heads, proj."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attention = (q @ k.transpose(-2, -1) * self.scale).softmax(dim=-1)
        return self.proj((attention @ v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    """timm's pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)), LayerNorm eps 1e-6, GELU."""

    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential()
        self.mlp.fc1, self.mlp.act, self.mlp.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def sincos_position_embedding(grid, dim):
    """vits.py build_2d_sincos_position_embedding: cls position zeros, then sin/cos of both coordinates."""
    grid_w, grid_h = torch.meshgrid(torch.arange(grid, dtype=torch.float32),
                                    torch.arange(grid, dtype=torch.float32), indexing="ij")
    omega = 1.0 / (10000.0 ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4)))
    out_w = torch.einsum("m,d->md", grid_w.flatten(), omega)
    out_h = torch.einsum("m,d->md", grid_h.flatten(), omega)
    patches = torch.cat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)
    return torch.cat([torch.zeros(1, dim), patches])[None]


class VisionTransformer(nn.Module):
    """timm's VisionTransformer as vits.py's VisionTransformerMoCo uses it, under timm's names; features
    are the final norm's cls token; the position embedding and (stop-grad-conv1) the patch
    projection do not train."""

    def __init__(self, meta):
        super().__init__()
        dim, patch, grid = meta["embed_dim"], meta["patch_size"], meta["image_size"] // meta["patch_size"]
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(sincos_position_embedding(grid, dim), requires_grad=False)
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(meta["in_channels"], dim, patch, stride=patch)
        self.patch_embed.proj.requires_grad_(not meta["stop_grad_conv1"])
        self.blocks = nn.Sequential(*[Block(dim, meta["heads"]) for _ in range(meta["depth"])])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Identity()

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def backbone_with_projector(meta):
    if meta.get("arch") == "vit_tiny_cpu":
        net = VisionTransformer(meta)
        net.head = mlp(meta["projector_layers"], meta["embed_dim"], meta["mlp_dim"], meta["dim"], last_bn=True)
        return net
    net = torchvision.models.resnet18()
    net.fc = mlp(2, net.fc.in_features, meta["mlp_dim"], meta["dim"], last_bn=True)
    return net


def load(module, state, prefix):
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    module.load_state_dict(own, strict=True)


def contrast(q, k, temperature):
    q, k = F.normalize(q, dim=1), F.normalize(k, dim=1)
    logits = q @ k.t() / temperature
    return F.cross_entropy(logits, torch.arange(q.shape[0])) * (2 * temperature)


class Lars:
    def __init__(self, named, lr, momentum, weight_decay, trust=0.001):
        self.named, self.lr, self.momentum, self.wd, self.trust = named, lr, momentum, weight_decay, trust
        self.mu = {name: torch.zeros_like(p) for name, p in named}

    @torch.no_grad()
    def step(self):
        for name, p in self.named:
            d = p.grad
            if p.ndim > 1:
                d = d + self.wd * p
                p_norm, d_norm = p.norm(), d.norm()
                one = torch.ones_like(p_norm)
                d = d * torch.where(p_norm > 0, torch.where(d_norm > 0, self.trust * p_norm / d_norm, one), one)
            self.mu[name].mul_(self.momentum).add_(d)
            p.sub_(self.lr * self.mu[name])


def adamw_from(named, meta, before):
    """torch.optim.AdamW (its defaults) holding the C++ optimizer's state before the steps."""
    optimizer = torch.optim.AdamW([p for _, p in named], lr=meta["lr"], weight_decay=meta["weight_decay"])
    for name, p in named:
        optimizer.state[p] = {"step": torch.tensor(float(before["optimizer/steps"].item())),
                              "exp_avg": before["optimizer/exp_avg/" + name].clone(),
                              "exp_avg_sq": before["optimizer/exp_avg_sq/" + name].clone()}
    return optimizer


def rounding_only_elements(named, meta):
    """{name: mask} of a ViT's elements whose gradient is exactly zero but for rounding: the key part
    of each qkv bias (the softmax over the keys ignores a shift that all keys share) and the final
    norm's bias (the projector's first BN removes a shift that all rows share). AdamW moves such an
    element by about lr whatever its gradient's size (m / sqrt(v)), so C++ and PyTorch step it by +-lr
    at random: these are held to |diff| <= 4 lr, after their gradients are checked to be ~0."""
    dim, grads = meta["embed_dim"], {name: p.grad for name, p in named}
    out = {"encoder_q/norm.bias": torch.ones(dim, dtype=torch.bool)}
    for block in range(meta["depth"]):
        key_part = torch.zeros(3 * dim, dtype=torch.bool)
        key_part[dim:2 * dim] = True
        out[f"encoder_q/blocks.{block}.attn.qkv.bias"] = key_part
    for name, mask in out.items():
        largest = grads[name][mask].abs().max().item()
        assert largest <= ROUNDING_GRADIENT, f"{name}: a gradient of {largest:.2e} where the model's is 0"
    return out


def optimizer_state(optimizer, named):
    """The optimizer's state under the names the C++ checkpoint gives it."""
    if isinstance(optimizer, Lars):
        return {"optimizer/momentum_buffer/" + k: v for k, v in optimizer.mu.items()}
    out = {}
    for name, p in named:
        state = optimizer.state[p]
        out["optimizer/exp_avg/" + name] = state["exp_avg"]
        out["optimizer/exp_avg_sq/" + name] = state["exp_avg_sq"]
        out["optimizer/steps"] = torch.tensor(int(state["step"].item()))
    return out


def main():
    tool, optimizer = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "lars"
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([tool, folder, optimizer], check=True)
        with open(os.path.join(folder, "index.json")) as f:
            index = json.load(f)
        meta, tensors = index["meta"], read_tensors(folder, index["tensors"])
    torch.set_num_threads(1)
    before = {k[len("before/"):]: v for k, v in tensors.items() if k.startswith("before/")}
    after = {k[len("after/"):]: v for k, v in tensors.items() if k.startswith("after/")}

    if meta.get("arch") == "vit_tiny_cpu" and not meta["predictor_last_bn"]:
        print("the ViT run's predictor lacks the official MoCo_ViT's last BatchNorm (predictor_last_bn)")
        return 1
    query, keys = backbone_with_projector(meta), backbone_with_projector(meta)
    predictor = mlp(meta.get("predictor_layers", 2), meta["dim"], meta["mlp_dim"], meta["dim"],
                    last_bn=meta["predictor_last_bn"])  # the run's model's, not a constant
    load(query, before, "encoder_q/")
    load(keys, before, "encoder_k/")
    load(predictor, before, "predictor/")
    for module in (query, keys, predictor):
        module.train()
    for p in keys.parameters():
        p.requires_grad_(False)
    if "encoder_q/pos_embed" in before:  # the fixed embedding, as vits.py builds it (the C++ one loaded above)
        expected_pos = sincos_position_embedding(meta["image_size"] // meta["patch_size"], meta["embed_dim"])
        pos_diff = (before["encoder_q/pos_embed"] - expected_pos).abs().max().item()
        print(f"pos_embed: max |diff| against vits.py's formula {pos_diff:.2e}")
        if not pos_diff <= TOLERANCE:
            return 1
    # What the optimizer trains (torch.optim skips a parameter without a gradient, as the frozen ones).
    named = [("encoder_q/" + n, p) for n, p in query.named_parameters() if p.requires_grad]
    named += [("predictor/" + n, p) for n, p in predictor.named_parameters()]
    if meta["optimizer"] == "adamw":
        optimizer = adamw_from(named, meta, before)
    else:
        optimizer = Lars(named, meta["lr"], meta["momentum"], meta["weight_decay"])
        for name in optimizer.mu:
            optimizer.mu[name].copy_(before["optimizer/momentum_buffer/" + name])

    failures = 0
    for step, cxx_loss in zip(meta["steps"], meta["losses"]):
        x1, x2 = tensors[f"input/x1_{step}"], tensors[f"input/x2_{step}"]
        progress = (step - 1) / meta["total_steps"]
        m = 1 - (1 - meta["m0"]) * (math.cos(math.pi * progress) + 1) / 2
        q1, q2 = predictor(query(x1)), predictor(query(x2))
        with torch.no_grad():
            for p_q, p_k in zip(query.parameters(), keys.parameters()):
                p_k.copy_(p_k * m + p_q * (1 - m))
            k1, k2 = keys(x1), keys(x2)
        loss = contrast(q1, k2, meta["temperature"]) + contrast(q2, k1, meta["temperature"])
        for _, p in named:
            p.grad = None
        loss.backward()
        optimizer.step()
        diff = abs(loss.item() - cxx_loss)
        print(f"step {step}: m {m:.6f}, loss C++ {cxx_loss:.7f} PyTorch {loss.item():.7f}, |diff| {diff:.2e}")
        if not diff <= TOLERANCE:
            failures += 1

    expected = {"encoder_q/" + k: v for k, v in query.state_dict().items()}
    expected.update({"encoder_k/" + k: v for k, v in keys.state_dict().items()})
    expected.update({"predictor/" + k: v for k, v in predictor.state_dict().items()})
    expected.update(optimizer_state(optimizer, named))
    if sorted(expected) != sorted(after):
        print("names differ:", sorted(set(expected) ^ set(after)))
        return 1
    worst, worst_name = 0.0, ""
    rounding_only = (rounding_only_elements(named, meta)
                     if meta.get("arch") == "vit_tiny_cpu" and meta["optimizer"] == "adamw" else {})
    for name, value in expected.items():
        got = after[name]
        if name in rounding_only:  # AdamW's arbitrary-sign steps on exact zeros: bounded by the step size
            mask = rounding_only[name]
            step_diff = (got - value.float()).abs()[mask]
            if step_diff.numel() and not step_diff.max().item() <= ADAMW_STEP_BOUND * meta["lr"]:
                print(f"{name}: an element of rounding-only gradient moved {step_diff.max().item():.2e}")
                failures += 1
            got, value = got.clone(), value.float().clone()
            got[mask] = value[mask]
        if got.dtype == torch.int64:
            if not torch.equal(got, value.to(torch.int64)):
                print(f"{name}: {got.tolist()} vs {value.tolist()}")
                failures += 1
            continue
        diff = (got - value.float()).abs().max().item()
        moved = (value.float() - before[name]).abs().max().item()
        if diff > worst:
            worst, worst_name = diff, name
        # LARS's buffers are in gradient units (a BN weight's sums to ~10): 1e-5 of their largest value.
        bound = TOLERANCE * max(1.0, value.abs().max().item()) if name.startswith("optimizer/") else TOLERANCE
        if not diff <= bound:
            print(f"{name}: max |diff| {diff:.2e} > {bound:.2e}")
            failures += 1
        # AdamW moves every weight by ~lr (1e-3) a step, so 1e-5 is already 1/200 of its change; its
        # m / sqrt(v) of a near-zero gradient is ill-conditioned element by element (1.2e-3 seen).
        if meta["optimizer"] == "lars" and not diff <= CHANGE_TOLERANCE * moved + CHANGE_FLOOR:
            print(f"{name}: max |diff| {diff:.2e} against a change of {moved:.2e}")
            failures += 1
    print(f"{len(expected)} tensors after {len(meta['steps'])} steps; largest |diff| {worst:.2e} ({worst_name})")
    if rounding_only:
        print(f"{sum(int(m.sum()) for m in rounding_only.values())} elements of rounding-only gradient in "
              f"{', '.join(rounding_only)}, held to {ADAMW_STEP_BOUND:g} lr")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
