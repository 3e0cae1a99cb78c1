#!/usr/bin/python3
"""MoCo v3's step in C++ against PyTorch (run with Debian's /usr/bin/python3).

Runs moco_v3_step_tool, which builds the v3 method (torchvision's resnet18 layout, small heads, LARS
or AdamW, batch 32), takes a step, then one more that it records, writing its state
before and after it; redoes each recorded step here from the state C++ began it with, written from
the MoCo v3 paper (Chen, Xie and He, ICCV 2021) and the official recipe as described there:
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

How each recorded step is checked. It is done from the state C++ began it with in float64 (the
reference), in float32 by PyTorch, and MC_RUNS times in float64 with fp32's rounding simulated (Monte
Carlo arithmetic): each operation's result r becomes r + u xi S, u = 2^-24, xi uniform in [-1, 1] per
element and run, S the sum of |terms| r sums (a convolution, Linear or matmul redone on absolute
values, forward and backward; a BatchNorm's or LayerNorm's means of |x|, |dy| and |dy x_hat|, shared
by their elements; |r| for an elementwise operation). u S is about fp32's rounding of a sum of terms
of random signs (Higham and Mary, SIAM J. Sci. Comput. 2019: sqrt(n) u S with high probability). The
runs' spread around float64 is fp32's rounding carried through this step: the network's conditioning,
the heads' BatchNorm over 32 rows, AdamW's m / sqrt(v) of a gradient that is 0 but for rounding
(+-lr). Every element of every tensor, and each loss, is held to BOUND_FACTOR x the largest of its own
largest deviation over the runs, the RMS deviation of its slice (first index; a 1-D tensor as a whole)
and, for the optimizer's results, its gradient's sum of |terms| carried through the optimizer times
the tensor's RMS deviation in those units (error_shapes()); plus 4 u |value|. C++'s and PyTorch's
fp32 results both.

Two things fp32 does that the simulated runs do not are checked apart (they depend on the kernels:
a fixed 1e-5 failed with OpenBLAS's SkylakeX kernels and passed with its Haswell ones):
- kinks. A ReLU input, or a max-pool's gap between its two largest inputs, within rounding of 0 is
  decided either way by fp32 (a 7% change of a layer's gradient seen, from an input of 8e-7). The
  simulated runs take float64's decisions; those within KINK_FACTOR x the runs' spread of their
  input are the candidates. Each one's effect (the gradient at the decision moved, carried back by
  autograd, through the optimizer, to first order) is fitted to a side's error, each taken or not;
  the side's reference is then the step redone in float64 with the ones taken the other way.
- LARS's trust ratio 0.001 |p| / |d| of each matrix: fp32's norm of n squares is off by up to
  (n - 1) u in any order (ATen's of a 2.4M-element gradient: 4e-4, against 1e-5 for the gradient).
  Each side's ratio relative to the reference's is read off its momentum buffer and held to
  (n + 3) u + BOUND_FACTOR x the runs' largest; its elements are then compared with that ratio.
Integers must be equal. Lines name what fails, with |error| / bound; each step prints the largest.

With `vit_adamw`: the backbone is a small ViT (vits.py's VisionTransformerMoCo on timm's layout, patch
4 on 32 px, dim 64, 4 blocks of 4 heads: vit_tiny_cpu), the projector of 3 layers and the predictor's
last BN (the official MoCo_ViT), stop-grad-conv1, AdamW, one step; the fixed position embedding is also
checked against vits.py's formula, and the frozen patch projection and position embedding must come
out of the step as they went in. With `vit_lars`: the same ViT with LARS.

usage: moco_v3_step_parity.py TOOL [lars|adamw|vit_adamw|vit_lars]
"""
import ctypes
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import types

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

U = 2.0 ** -24  # fp32's unit roundoff
MC_RUNS = 4
# A side's error may be this many times the spread fp32's simulated rounding gave: the runs are few
# (a per-element maximum of 4 can fall well below that element's spread) and real kernels sum in
# other orders than the model's independent roundings.
BOUND_FACTOR = 8.0
KINK_FACTOR = 4.0  # see ambiguous_kinks()
FIT_ELEMENTS = 1_000_000  # the kinks' fit sees about this many elements of the optimizer's tensors
POS_EMBED_TOLERANCE = 1e-6  # fp32 sin/cos of arguments below 8: a few ulps of values up to 1

# The simulated rounding's generator while a run simulates fp32 on float64; None otherwise.
ROUNDING = None


def noise(magnitude):
    """u xi magnitude, xi uniform in [-1, 1] per element: one rounding of a result whose terms'
    absolute values sum to magnitude."""
    xi = torch.rand(magnitude.shape, dtype=magnitude.dtype, generator=ROUNDING) * 2 - 1
    return U * magnitude * xi


class _Rounded(torch.autograd.Function):
    """An elementwise operation's rounding: the result forward, the gradient backward."""

    @staticmethod
    def forward(ctx, x):
        return x + noise(x.abs())

    @staticmethod
    def backward(ctx, g):
        return g + noise(g.abs())


def rnd(x):
    return x if ROUNDING is None else _Rounded.apply(x)


TERMS = None  # {id(parameter): the sum of |terms| of its gradient} while a simulated run keeps them


def size_of(op, *tensors):
    """op on the tensors' absolute values: a result's sum of |terms|. In float32, which is plenty for a
    rounding's size and takes a fraction of float64's time."""
    return op(*[None if t is None else t.abs().float() for t in tensors]).double()


def gradient_sum(param, value, size):
    """A parameter's gradient, a sum whose |terms| sum to size: rounded, and size kept in TERMS."""
    if param is None:
        return None
    if TERMS is not None:
        TERMS[id(param)] = TERMS.get(id(param), 0) + size
    return value + noise(size)


class _Matmul(torch.autograd.Function):
    """a @ b and its gradients, each rounded by u |a| @ |b| (the sums of |terms|)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b + noise(size_of(torch.matmul, a, b))

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        bt, at = b.transpose(-2, -1), a.transpose(-2, -1)
        return g @ bt + noise(size_of(torch.matmul, g, bt)), at @ g + noise(size_of(torch.matmul, at, g))


def matmul(a, b):
    return a @ b if ROUNDING is None else _Matmul.apply(a, b)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.params = (w, b)
        return F.linear(x, w, b) + noise(size_of(F.linear, x, w, b))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
        dx = g @ w + noise(size_of(torch.matmul, g, w))
        dw = gradient_sum(ctx.params[0], g2.t() @ x2, size_of(torch.matmul, g2.t(), x2))
        return dx, dw, gradient_sum(ctx.params[1], g2.sum(0), g2.abs().sum(0))


class _Conv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding):
        ctx.save_for_backward(x, w)
        ctx.conv, ctx.params = (stride, padding), (w, b)
        out = F.conv2d(x, w, b, stride, padding)
        return out + noise(size_of(lambda x_, w_, b_: F.conv2d(x_, w_, b_, stride, padding), x, w, b))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        stride, padding = ctx.conv
        dx = nn.grad.conv2d_input(x.shape, w, g, stride, padding)
        dx = dx + noise(size_of(lambda w_, g_: nn.grad.conv2d_input(x.shape, w_, g_, stride, padding), w, g))
        dw = gradient_sum(ctx.params[0], nn.grad.conv2d_weight(x, w.shape, g, stride, padding),
                          size_of(lambda x_, g_: nn.grad.conv2d_weight(x_, w.shape, g_, stride, padding), x, g))
        return dx, dw, gradient_sum(ctx.params[1], g.sum((0, 2, 3)), g.abs().sum((0, 2, 3))), None, None


class _Normalize(torch.autograd.Function):
    """Train-mode BatchNorm (dims: all but 1) or LayerNorm (dims: the last) without its running
    statistics: y = w x_hat + b. Rounded: the mean by u mean|x| (shared by its elements), x_hat and
    y elementwise; backward, the means of dy and dy x_hat (shared), dx elementwise, and the sums for
    w and b by the sums of |terms|."""

    @staticmethod
    def forward(ctx, x, w, b, dims, eps):
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, unbiased=False, keepdim=True)
        invstd = (var + eps).rsqrt()
        x_hat = (x - mean) * invstd
        ctx.save_for_backward(x_hat, invstd, w)
        ctx.dims, ctx.params = dims, (w, b)
        scale = torch.ones_like(invstd) if w is None else w.reshape(_param_view(x, dims)).abs()
        y = x_hat if w is None else x_hat * w.reshape(_param_view(x, dims)) + b.reshape(_param_view(x, dims))
        shared = noise(x.abs().mean(dims, keepdim=True)) * invstd * scale
        return y + shared + noise(2 * x_hat.abs() * scale + y.abs())

    @staticmethod
    def backward(ctx, dy):
        x_hat, invstd, w = ctx.saved_tensors
        dims = ctx.dims
        view = _param_view(x_hat, dims)
        wv = torch.ones_like(invstd) if w is None else w.reshape(view)
        g = dy * wv
        mean_g = g.mean(dims, keepdim=True) + noise(g.abs().mean(dims, keepdim=True))
        mean_gx = (g * x_hat).mean(dims, keepdim=True) + noise((g * x_hat).abs().mean(dims, keepdim=True))
        dx = (g - mean_g - x_hat * mean_gx) * invstd
        dx = dx + noise((g.abs() + mean_g.abs() + (x_hat * mean_gx).abs()) * invstd + dx.abs())
        if w is None:
            return dx, None, None, None, None
        other = [d for d in range(dy.dim()) if d not in _param_dims(dy, dims)]
        dw = gradient_sum(ctx.params[0], (dy * x_hat).sum(other).reshape(w.shape),
                          (dy * x_hat).abs().sum(other).reshape(w.shape))
        db = gradient_sum(ctx.params[1], dy.sum(other).reshape(w.shape), dy.abs().sum(other).reshape(w.shape))
        return dx, dw, db, None, None


def _param_dims(x, dims):
    """The dims a norm's weight spans: BatchNorm's channel (dim 1), LayerNorm's last."""
    return [1] if dims != (x.dim() - 1,) else [x.dim() - 1]


def _param_view(x, dims):
    shape = [1] * x.dim()
    for d in _param_dims(x, dims):
        shape[d] = x.shape[d]
    return shape


def batch_norm_rounded(m, x):
    dims = (0,) + tuple(range(2, x.dim()))
    if m.training:
        with torch.no_grad():  # the running statistics as torch updates them, each value rounded once
            n = x.numel() / x.shape[1]
            mean, var = x.mean(dims), x.var(dims, unbiased=False) * n / (n - 1)
            new_mean = (1 - m.momentum) * m.running_mean + m.momentum * mean
            new_var = (1 - m.momentum) * m.running_var + m.momentum * var
            size = m.momentum * x.abs().mean(dims)
            m.running_mean.copy_(new_mean + noise((1 - m.momentum) * m.running_mean.abs() + size + new_mean.abs()))
            m.running_var.copy_(new_var + noise((1 - m.momentum) * m.running_var + 2 * m.momentum * (x * x).mean(dims)
                                                + new_var.abs()))
            m.num_batches_tracked.add_(1)
    return _Normalize.apply(x, m.weight, m.bias, dims, m.eps)


def simulate_fp32(module):
    """Makes module's float64 forward and backward round as fp32 would (noise()), names unchanged."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            assert m.groups == 1 and m.dilation == (1, 1)
            m.forward = types.MethodType(lambda s, x: _Conv.apply(x, s.weight, s.bias, s.stride, s.padding), m)
        elif isinstance(m, nn.Linear):
            m.forward = types.MethodType(lambda s, x: _Linear.apply(x, s.weight, s.bias), m)
        elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.forward = types.MethodType(batch_norm_rounded, m)
        elif isinstance(m, nn.LayerNorm):
            m.forward = types.MethodType(lambda s, x: _Normalize.apply(x, s.weight, s.bias, (x.dim() - 1,), s.eps), m)
        elif isinstance(m, (nn.GELU, nn.AdaptiveAvgPool2d)):
            m.register_forward_hook(lambda s, inputs, out: rnd(out))
        elif isinstance(m, torchvision.models.resnet.BasicBlock):  # its residual sum
            m.register_forward_hook(lambda s, inputs, out: rnd(out))
    return module


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
        attention = rnd(rnd(matmul(q, k.transpose(-2, -1)) * self.scale).softmax(dim=-1))
        return self.proj(matmul(attention, v).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    """timm's pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)), LayerNorm eps 1e-6, GELU."""

    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential()
        self.mlp.fc1, self.mlp.act, self.mlp.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = rnd(x + self.attn(self.norm1(x)))
        return rnd(x + self.mlp(self.norm2(x)))


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
        x = rnd(torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed)
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
    q, k = rnd(F.normalize(q, dim=1)), rnd(F.normalize(k, dim=1))
    logits = rnd(matmul(q, k.t()) / temperature)
    return rnd(F.cross_entropy(logits, torch.arange(q.shape[0])) * (2 * temperature))


class Lars:
    def __init__(self, named, lr, momentum, weight_decay, trust=0.001):
        self.named, self.lr, self.momentum, self.wd, self.trust = named, lr, momentum, weight_decay, trust
        self.mu = {name: torch.zeros_like(p) for name, p in named}

    @torch.no_grad()
    def step(self):
        for name, p in self.named:
            d = p.grad
            if p.ndim > 1:
                d = rnd(d + self.wd * p)
                p_norm, d_norm = p.norm(), d.norm()  # their rounding: TrustRatios
                one = torch.ones_like(p_norm)
                d = rnd(d * torch.where(p_norm > 0, torch.where(d_norm > 0, rnd(self.trust * p_norm / d_norm), one), one))
            self.mu[name].copy_(rnd(rnd(self.mu[name] * self.momentum) + d))
            p.copy_(rnd(p - rnd(self.lr * self.mu[name])))



def adamw_from(named, meta, before):
    """torch.optim.AdamW (its defaults) holding the C++ optimizer's state before the step."""
    optimizer = torch.optim.AdamW([p for _, p in named], lr=meta["lr"], weight_decay=meta["weight_decay"])
    for name, p in named:
        optimizer.state[p] = {"step": torch.tensor(float(before["optimizer/steps"].item())),
                              "exp_avg": before["optimizer/exp_avg/" + name].clone(),
                              "exp_avg_sq": before["optimizer/exp_avg_sq/" + name].clone()}
    return optimizer


def optimizer_results(meta, state):
    """The optimizer's float results: its state's tensors and the parameters it trains."""
    return [k for k in state if k.startswith("optimizer/") and k != "optimizer/steps"] + trained_names(meta, state)


def trained_names(meta, state):
    """The parameters the optimizer holds state for (torch.optim skips those without a gradient)."""
    prefix = "optimizer/exp_avg/" if meta["optimizer"] == "adamw" else "optimizer/momentum_buffer/"
    return [k[len(prefix):] for k in state if k.startswith(prefix)]


@torch.no_grad()
def optimized(meta, state, grads):
    """The optimizer's step from state with these gradients: {name: tensor} of the parameters and the
    optimizer's state after it, under the C++ checkpoint's names (the dtype of grads)."""
    dtype = next(iter(grads.values())).dtype
    named = [(name, state[name].to(dtype).clone().requires_grad_()) for name in trained_names(meta, state)]
    for name, p in named:
        p.grad = grads[name]
    before = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items() if k.startswith("optimizer/")}
    if meta["optimizer"] == "adamw":
        optimizer = adamw_from(named, meta, before)
        start = {name: p.clone() for name, p in named}
        optimizer.step()
        out = {}
        for name, p in named:
            st = optimizer.state[p]
            out["optimizer/exp_avg/" + name] = st["exp_avg"]
            out["optimizer/exp_avg_sq/" + name] = st["exp_avg_sq"]
            if ROUNDING is not None:  # each result rounded by a few u of its terms: decay, moments, update
                g = grads[name]
                st["exp_avg"].add_(noise(st["exp_avg"].abs() + g.abs()))
                st["exp_avg_sq"].add_(noise(2 * st["exp_avg_sq"].abs()))
                update = (start[name] * (1 - meta["lr"] * meta["weight_decay"]) - p).abs()
                p.add_(noise(start[name].abs() + 4 * update))
            out[name] = p.detach()
            out["optimizer/steps"] = torch.tensor(int(st["step"].item()))
        return out
    optimizer = Lars(named, meta["lr"], meta["momentum"], meta["weight_decay"])
    for name in optimizer.mu:
        optimizer.mu[name].copy_(before["optimizer/momentum_buffer/" + name])
    optimizer.step()
    out = {"optimizer/momentum_buffer/" + k: v for k, v in optimizer.mu.items()}
    out.update({name: p.detach() for name, p in named})
    return out


class OptimizerEffect:
    """The optimizer's results' first-order change with a change of the gradients (float64, from the
    step's start): what the kinks' fit uses; a flip's full effect is then optimized() again."""

    def __init__(self, meta, start, grads):
        self.meta, self.start, self.grads, self.pre = meta, start, grads, {}
        for name, g in grads.items():
            if meta["optimizer"] == "lars" and g.dim() > 1:
                d = g + meta["weight_decay"] * start[name].double()
                ratio = 0.001 * start[name].double().norm() / d.norm()
                self.pre[name] = (d, ratio, d.square().sum())

    def __call__(self, dgrads):
        meta, out = self.meta, {}
        for name, dg in dgrads.items():
            if meta["optimizer"] == "lars":
                if name in self.pre:  # d r with r = 0.001 |p| / |d|: dr / r = -<d, dd> / |d|^2
                    d, ratio, square = self.pre[name]
                    dg = ratio * (dg - d * ((d * dg).sum() / square))
                out["optimizer/momentum_buffer/" + name] = dg
                out[name] = -meta["lr"] * dg
                continue
            beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.AdamW's defaults
            t = self.start["optimizer/steps"].item() + 1
            g = self.grads[name]
            m = beta1 * self.start["optimizer/exp_avg/" + name].double() + (1 - beta1) * g
            v = beta2 * self.start["optimizer/exp_avg_sq/" + name].double() + (1 - beta2) * g * g
            dm, dv = (1 - beta1) * dg, 2 * (1 - beta2) * g * dg
            root = v.sqrt() / math.sqrt(1 - beta2 ** t)
            droot = torch.where(v > 0, dv / (2 * v.sqrt() * math.sqrt(1 - beta2 ** t)), torch.zeros_like(v))
            denom = root + eps
            out["optimizer/exp_avg/" + name], out["optimizer/exp_avg_sq/" + name] = dm, dv
            out[name] = -meta["lr"] / (1 - beta1 ** t) * (dm / denom - m * droot / denom.square())
        return out


class Decisions:
    """What each ReLU (is its input > 0) and max-pool (which input is largest) decided, in call order.
    The float64 run records them, with their inputs (in its autograd graph) and the gradients reaching
    their outputs; the simulated runs take the same decisions (their rounding is then measured without
    any kink) and keep their inputs, whose spread says which decisions fp32 could take either way."""

    def __init__(self, recorded=None):
        self.recorded, self.calls, self.inputs = recorded, [], []

    def flipped(self, kinks):
        """A copy of these recorded decisions with the kinks (ambiguous_kinks()) taken the other way."""
        out = Decisions()
        out.calls = list(self.calls)
        for j, i, other in kinks:
            entry = dict(out.calls[j])
            if entry["kind"] == "relu":
                entry["mask"] = entry["mask"].clone()
                entry["mask"].view(-1)[i] = ~entry["mask"].view(-1)[i]
            else:
                out_flat, _ = i
                entry["index"] = entry["index"].clone()
                entry["index"].view(-1)[out_flat] = other
            out.calls[j] = entry
        return out

    def relu(self, x):
        if self.recorded is not None:
            self.inputs.append(x.detach())
            return x * self.recorded.calls[len(self.inputs) - 1]["mask"]
        entry = {"kind": "relu", "input": x, "mask": x > 0}
        return self._record(entry, x * entry["mask"])

    def max_pool(self, m, x):
        if self.recorded is not None:
            self.inputs.append(x.detach())
            index = self.recorded.calls[len(self.inputs) - 1]["index"]
            return x.flatten(2).gather(2, index.flatten(2)).view(index.shape)
        out, index = F.max_pool2d(x, m.kernel_size, m.stride, m.padding, return_indices=True)
        return self._record({"kind": "pool", "input": x, "index": index, "pool": m}, out)

    def _record(self, entry, out):
        self.calls.append(entry)
        if out.requires_grad:
            def keep(grad):  # the step's gradient only: kink_gradient()'s backward passes fire it too
                entry.setdefault("grad", grad)
            out.register_hook(keep)
        return out


DECISIONS = None  # the run's Decisions while one records or imposes them


def watch_decisions(module):
    for m in module.modules():
        if isinstance(m, nn.ReLU):
            m.forward = types.MethodType(lambda s, x: DECISIONS.relu(x), m)
        elif isinstance(m, nn.MaxPool2d):
            m.forward = types.MethodType(lambda s, x: DECISIONS.max_pool(s, x), m)
    return module


def one_step(meta, state, x1, x2, step, dtype, seed=None, decisions=None):
    """The step from state (C++'s, cast to dtype): (loss, the state after it as float64 or int64, the
    gradients, the trained parameters). With a seed, in float64 with fp32's rounding simulated; with
    decisions, the ReLUs and max-pools record or take them."""
    global ROUNDING, DECISIONS, TERMS
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    query, keys = backbone_with_projector(meta), backbone_with_projector(meta)
    predictor = mlp(meta.get("predictor_layers", 2), meta["dim"], meta["mlp_dim"], meta["dim"],
                    last_bn=meta["predictor_last_bn"])  # the run's model's, not a constant
    for module, prefix in ((query, "encoder_q/"), (keys, "encoder_k/"), (predictor, "predictor/")):
        module.to(dtype)
        load(module, state, prefix)
        module.train()
        if seed is not None:
            simulate_fp32(module)
        if decisions is not None:
            watch_decisions(module)
    for p in keys.parameters():
        p.requires_grad_(False)
    params = dict([("encoder_q/" + n, p) for n, p in query.named_parameters()] +
                  [("predictor/" + n, p) for n, p in predictor.named_parameters()])
    named = [(name, params[name]) for name in trained_names(meta, state)]
    ROUNDING = None if seed is None else torch.Generator().manual_seed(seed)
    DECISIONS, TERMS = decisions, None if seed is None else {}
    try:
        x1, x2 = x1.to(dtype), x2.to(dtype)
        progress = (step - 1) / meta["total_steps"]
        m = 1 - (1 - meta["m0"]) * (math.cos(math.pi * progress) + 1) / 2
        q1, q2 = predictor(query(x1)), predictor(query(x2))
        with torch.no_grad():
            for p_q, p_k in zip(query.parameters(), keys.parameters()):
                p_k.copy_(p_k * m + p_q * (1 - m))
                if seed is not None:
                    p_k.add_(noise(2 * p_k.abs() + p_q.abs() * (1 - m)))
            k1, k2 = keys(x1), keys(x2)
        loss = contrast(q1, k2, meta["temperature"]) + contrast(q2, k1, meta["temperature"])
        loss.backward(retain_graph=decisions is not None and decisions.recorded is None)
        grads = {name: p.grad.detach().clone() for name, p in named}
        after = {"encoder_q/" + k: v for k, v in query.state_dict().items()}
        after.update({"encoder_k/" + k: v for k, v in keys.state_dict().items()})
        after.update({"predictor/" + k: v for k, v in predictor.state_dict().items()})
        after.update({k: v for k, v in state.items() if k.startswith("optimizer/")})
        after.update(optimized(meta, state, grads))
        terms = {name: TERMS[id(p)] for name, p in named if id(p) in TERMS} if TERMS is not None else {}
    finally:
        ROUNDING, DECISIONS, TERMS = None, None, None
    after = {k: v.detach().double() if v.is_floating_point() else v.detach() for k, v in after.items()}
    return types.SimpleNamespace(loss=loss.item(), state=after, grads={k: v.double() for k, v in grads.items()},
                                 named=named, terms=terms)


def bounds(reference, deviations, shape=None):
    """Per element: BOUND_FACTOR x the largest of its own largest deviation over the simulated runs, its
    slice's RMS deviation and (given the shape of an optimizer result's error, error_shapes()) that
    shape times the tensor's RMS deviation in its units; plus 4 u |reference|. The runs are few: a
    per-element maximum of 4 can fall well below that element's spread, and an element whose
    gradient sums large terms errs more than its slice."""
    deviations = torch.stack([d.abs() for d in deviations])
    largest = deviations.max(0).values
    if reference.dim() >= 2:
        dims = [0] + list(range(2, deviations.dim()))
        pooled = deviations.square().mean(dims).sqrt().reshape([-1] + [1] * (reference.dim() - 1))
    else:
        pooled = deviations.square().mean().sqrt()
    largest = torch.maximum(largest, pooled)
    if shape is not None and (shape > 0).any():
        units = (deviations / shape)[:, shape > 0]
        largest = torch.maximum(largest, units.square().mean().sqrt() * shape)
    return BOUND_FACTOR * largest + 4 * U * reference.abs()


def error_shapes(meta, start, grads, terms):
    """Per optimizer result, how its element's error scales with its gradient's sum of |terms| (the
    simulated runs' TERMS): that sum through the optimizer's derivative, in absolute values. LARS: the
    buffer's is r terms (r the trust ratio, 1 for a vector), the weight's lr times it; AdamW: the
    moments' (1 - b1) terms and 2 (1 - b2) |g| terms, the weight's lr / (1 - b1^t) times
    ((1 - b1) terms / denom + |m| d(denom)), denom = sqrt(v / (1 - b2^t)) + eps."""
    out = {}
    for name, g in grads.items():
        if name not in terms:
            continue
        size = terms[name].abs()
        if meta["optimizer"] == "lars":
            if g.dim() > 1:
                p = start[name].double()
                size = size * (0.001 * p.norm() / (g + meta["weight_decay"] * p).norm())
            out["optimizer/momentum_buffer/" + name], out[name] = size, meta["lr"] * size
            continue
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        t = start["optimizer/steps"].item() + 1
        m = beta1 * start["optimizer/exp_avg/" + name].double() + (1 - beta1) * g
        v = beta2 * start["optimizer/exp_avg_sq/" + name].double() + (1 - beta2) * g * g
        dv = 2 * (1 - beta2) * g.abs() * size
        denom = v.sqrt() / math.sqrt(1 - beta2 ** t) + eps
        droot = torch.where(v > 0, dv / (2 * v.sqrt() * math.sqrt(1 - beta2 ** t)), torch.zeros_like(v))
        out["optimizer/exp_avg/" + name], out["optimizer/exp_avg_sq/" + name] = (1 - beta1) * size, dv
        out[name] = meta["lr"] / (1 - beta1 ** t) * ((1 - beta1) * size / denom + m.abs() * droot / denom.square())
    return out


def spread(reference, runs):
    """Per element, the larger of its largest deviation over the runs and its channel's (dim 1) RMS one."""
    deviations = torch.stack([(r - reference).abs() for r in runs])
    dims = [0, 1] + list(range(3, deviations.dim()))
    shape = [1] * reference.dim()
    shape[1] = reference.shape[1]
    return torch.maximum(deviations.max(0).values, deviations.square().mean(dims).sqrt().reshape(shape))


def ambiguous_kinks(exact, simulated):
    """The decisions fp32 may take either way: a ReLU input, or a max-pool's gap between its largest
    input and the next, within KINK_FACTOR x the simulated runs' spread of it (per element, at least
    its channel's RMS). Only those the gradient passes (the query encoder's and the predictor's).
    Returns [(call, flat index of the input, flat index of the other input for a max-pool)]."""
    found = []
    for j, entry in enumerate(exact.calls):
        if "grad" not in entry:
            continue
        x = entry["input"].detach()
        sigma = spread(x, [run.inputs[j] for run in simulated])
        if entry["kind"] == "relu":
            for i in torch.nonzero((x.abs() <= KINK_FACTOR * sigma).flatten()).flatten().tolist():
                found.append((j, i, None))
            continue
        m, index = entry["pool"], entry["index"]
        k, stride, pad = m.kernel_size, m.stride, m.padding
        n, c, h, w = x.shape
        windows = F.unfold(F.pad(x, (pad, pad, pad, pad), value=-math.inf), k, stride=stride).view(n, c, k * k, -1)
        top = windows.topk(2, dim=2)
        gap = top.values[:, :, 0] - top.values[:, :, 1]
        noise_of = F.unfold(F.pad(sigma.expand_as(x), (pad, pad, pad, pad)), k, stride=stride).view(n, c, k * k, -1)
        width = noise_of.gather(2, top.indices).sum(2)
        out_w = index.shape[-1]
        # A window of zeros (ReLU outputs) ties exactly in any precision, and passes no gradient on.
        close = (gap <= KINK_FACTOR * width) & (top.values[:, :, 0] > 0)
        for flat in torch.nonzero(close.flatten()).flatten().tolist():
            b, ch, pos = flat // (c * gap.shape[-1]), (flat // gap.shape[-1]) % c, flat % gap.shape[-1]
            chosen = index[b, ch].flatten()[pos].item()
            offsets = [t.item() for t in top.indices[b, ch, :, pos]]
            rows = [(pos // out_w) * stride - pad + o // k for o in offsets]
            cols = [(pos % out_w) * stride - pad + o % k for o in offsets]
            inputs = [r * w + col for r, col in zip(rows, cols)]
            other = inputs[1] if inputs[0] == chosen else inputs[0]
            found.append((j, ((b * c + ch) * index[b, ch].numel() + pos, chosen), other))
    return found


def kink_gradient(exact, named, kink):
    """The change of every trained parameter's gradient if fp32 took the other side of this kink:
    the gradient at the decision's output moves (ReLU: to or from its input; max-pool: to the other
    input), and flows back from there."""
    j, i, other = kink
    entry = exact.calls[j]
    x = entry["input"]
    if entry["kind"] == "relu":
        mask, grad = entry["mask"].flatten()[i], entry["grad"].flatten()[i]
        moved = x.flatten()[i] * grad * (1.0 - 2.0 * mask.double())
    else:
        out_flat, chosen = i
        n_c, plane = divmod(out_flat, entry["index"][0, 0].numel())
        grad = entry["grad"].flatten(0, 1)[n_c].flatten()[plane]
        inputs = x.flatten(0, 1)[n_c].flatten()
        moved = grad * (inputs[other] - inputs[chosen])
    grads = torch.autograd.grad(moved, [p for _, p in named], retain_graph=True, allow_unused=True)
    return {name: torch.zeros_like(p) if g is None else g.detach() for (name, p), g in zip(named, grads)}


def fit(error, weight, columns, boxed):
    """Coefficients minimising |weight (error - sum_i x_i columns_i)|^2, the boxed ones (the kinks) 0 or
    1: a decision is taken one way or the other. Least squares with the boxed ones in [0, 1] first
    (an active set: one out of its box is held at the nearer end, and let go when the gradient points
    back in), then each rounded to 0 or 1 and toggled while that lowers the residual, the free ones
    solved again each time. The vectors are a strided subsample of the optimizer's tensors."""
    if not columns:
        return []
    d = torch.stack(columns) * weight
    gram, rhs = d @ d.t(), d @ (error * weight)
    n = len(columns)

    def solve(held):
        """The free coefficients' least squares with the held ones fixed."""
        x = torch.zeros(n, dtype=torch.float64)
        for i, v in held.items():
            x[i] = v
        free = [i for i in range(n) if i not in held]
        if free:
            f, h = torch.tensor(free), torch.tensor(list(held), dtype=torch.long)
            b_free = rhs[f] - (gram[f][:, h] @ x[h] if len(held) else 0)
            x[f] = torch.linalg.lstsq(gram[f][:, f], b_free.unsqueeze(1)).solution.squeeze(1)
        return x

    held = {i: 0.0 for i in range(n) if gram[i, i] <= 0}  # a kink whose flip changes nothing
    for _ in range(4 * n + 10):
        x = solve(held)
        out = [i for i in range(n) if i not in held and boxed[i] and not 0.0 <= x[i] <= 1.0]
        if out:
            worst = max(out, key=lambda i: max(-x[i].item(), x[i].item() - 1.0))
            held[worst] = 0.0 if x[worst] < 0.5 else 1.0
            continue
        slope = gram @ x - rhs  # d objective / dx / 2
        back = [i for i, v in held.items() if gram[i, i] > 0 and ((v == 0.0 and slope[i] < 0) or (v == 1.0 and slope[i] > 0))]
        if not back:
            break
        del held[back[0]]
    binary = {i: float(x[i] >= 0.5) for i in range(n) if boxed[i]}
    objective = lambda x: (x @ gram @ x - 2 * rhs @ x).item()
    best = objective(solve(binary))
    improved = True
    while improved:
        improved = False
        for i in binary:
            trial = dict(binary)
            trial[i] = 1.0 - trial[i]
            value = objective(solve(trial))
            if value < best:
                binary, best, improved = trial, value, True
    return solve(binary).tolist()


class Sampler:
    """Every stride-th element of the optimizer's results, concatenated: what the kinks' fit sees."""

    def __init__(self, like, names):
        self.names, total = names, sum(like[k].numel() for k in names)
        self.stride = max(1, total // FIT_ELEMENTS)
        self.offsets, offset = {}, 0
        for k in names:
            n = (like[k].numel() + self.stride - 1) // self.stride
            self.offsets[k], offset = (offset, n), offset + n
        self.size = offset

    def __call__(self, values):
        return torch.cat([values[k].flatten()[::self.stride].double() for k in self.names])

    def sparse(self, values):
        """Of values given for a few names, 0 elsewhere."""
        out = torch.zeros(self.size, dtype=torch.float64)
        for k, v in values.items():
            start, n = self.offsets[k]
            out[start:start + n] = v.flatten()[::self.stride]
        return out


class TrustRatios:
    """LARS's trust ratio 0.001 |p| / |d| of each matrix, checked on its own: fp32 sums the n squares of
    a norm with a relative error up to (n - 1) u in any order (the terms are positive), and ATen's fp32
    norm of a 2.4M-element gradient is off by 4e-4, far beyond a sum's typical rounding. A result's
    ratio, relative to float64's, is read off its momentum buffer: s = <dt, dt64> / <dt64, dt64>, dt
    its buffer less momentum x the buffer it began with (LARS's scaled update); float64's buffer and
    weight with that ratio (buffer + (s - 1) dt64, weight - lr (s - 1) dt64) are then what the result's
    elements are held to."""

    def __init__(self, meta, start, exact):
        self.meta, self.exact, self.updates = meta, exact, {}
        if meta["optimizer"] != "lars":
            return
        prefix = "optimizer/momentum_buffer/"
        for name, buffer in start.items():
            if name.startswith(prefix) and buffer.dim() > 1:
                began = meta["momentum"] * buffer.double()
                self.updates[name[len(prefix):]] = (name, began, exact[name] - began)

    def ratios(self, result):
        out = {}
        for param, (buffer, began, dt64) in self.updates.items():
            out[param] = ((result[buffer].double() - began) * dt64).sum().item() / dt64.square().sum().item()
        return out

    def reference_of(self, name, ratios):
        """reference(ratios)[name], alone."""
        for param, (buffer, _, dt64) in self.updates.items():
            if name == buffer:
                return self.exact[buffer] + (ratios[param] - 1) * dt64
            if name == param:
                return self.exact[param] - self.meta["lr"] * (ratios[param] - 1) * dt64
        return self.exact[name]

    def columns(self, sampler):
        """Per matrix, float64's result's change with its ratio, subsampled: dt64 on the buffer, -lr dt64
        on the weight, 0 elsewhere."""
        return [sampler.sparse({buffer: dt64, param: -self.meta["lr"] * dt64})
                for param, (buffer, _, dt64) in self.updates.items()]

    def changes(self, result, base):
        """Per matrix, result's ratio relative to base's: <dt, db> / <db, db> - 1, dt and db their
        buffers less the one the step began with (their LARS updates)."""
        out = []
        for param, (buffer, began, _) in self.updates.items():
            db = base[buffer] - began
            out.append(((result[buffer].double() - base[buffer]) * db).sum().item() / db.square().sum().item())
        return out

    def apply(self, base, changes):
        """base with each matrix's ratio changed by changes[param] (relative to base's)."""
        ref = dict(base)
        for (param, (buffer, began, _)), change in zip(self.updates.items(), changes):
            db = base[buffer] - began
            ref[buffer] = base[buffer] + change * db
            ref[param] = base[param] - self.meta["lr"] * change * db
        return ref

    def bounds(self, simulated_ratios):
        """(n + 3) u for the two norms' sums of n squares, their square roots and the division, plus
        BOUND_FACTOR x the simulated runs' largest ratio error (the gradients' rounding)."""
        out = {}
        for param, (buffer, _, dt64) in self.updates.items():
            largest = max(abs(r[param] - 1) for r in simulated_ratios)
            out[param] = (dt64.numel() + 3) * U + BOUND_FACTOR * largest
        return out


def release_memory():
    """Gives freed memory back to the system: a step's float64 states are large, and glibc keeps them."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def core_name():
    """The kernels OpenBLAS runs in this process (the tool's, in the same environment)."""
    try:
        blas = ctypes.CDLL("libblas.so.3")
        blas.openblas_get_corename.restype = ctypes.c_char_p
        return blas.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "not OpenBLAS"


def check_step(meta, start, end, x1, x2, step, cxx_loss, report):
    """One recorded step: C++'s and PyTorch's fp32 against float64; returns the failures."""
    exact_decisions = Decisions()
    reference = one_step(meta, start, x1, x2, step, torch.float64, decisions=exact_decisions)
    loss64, exact, grads64, named64 = reference.loss, reference.state, reference.grads, reference.named
    if sorted(exact) != sorted(end):
        print("names differ:", sorted(set(exact) ^ set(end)))
        return 1
    fp32 = one_step(meta, start, x1, x2, step, torch.float32)
    loss32, fp32 = fp32.loss, {k: v.float() if v.is_floating_point() else v for k, v in fp32.state.items()}
    trust = TrustRatios(meta, start, exact)
    # The simulated runs: their deviations from float64 (in float32, to save memory), each with its own
    # trust ratios; the first one's sums of |terms|; their decisions' inputs (for the kinks).
    losses, deviations, simulated_ratios, simulated_decisions, terms = [], [], [], [], None
    for run in range(MC_RUNS):
        decisions = Decisions(recorded=exact_decisions)
        simulated = one_step(meta, start, x1, x2, step, torch.float64, seed=1000 * step + run, decisions=decisions)
        ratios = trust.ratios(simulated.state)
        deviations.append({name: (value - trust.reference_of(name, ratios)).float()
                           for name, value in simulated.state.items() if value.is_floating_point()})
        losses.append(simulated.loss)
        simulated_ratios.append(ratios)
        decisions.inputs = [x.float() for x in decisions.inputs]
        simulated_decisions.append(decisions)
        terms = simulated.terms if terms is None else terms
        release_memory()
    simulated = None
    failures = 0
    loss_bound = bounds(torch.tensor(loss64), [torch.tensor(loss - loss64) for loss in losses]).item()
    print(f"step {step}: loss float64 {loss64:.7f}, C++ {cxx_loss:.7f}, PyTorch fp32 {loss32:.7f}; bound "
          f"{loss_bound:.2e}, |error| / bound C++ {abs(cxx_loss - loss64) / loss_bound:.2f}, PyTorch "
          f"{abs(loss32 - loss64) / loss_bound:.2f}")
    for side, loss in (("C++", cxx_loss), ("PyTorch", loss32)):
        report.append((step, "loss", side, abs(loss - loss64) / loss_bound))
        if not abs(loss - loss64) <= loss_bound:
            failures += 1

    ratio_bounds = trust.bounds(simulated_ratios)
    shapes = error_shapes(meta, start, grads64, terms)
    element_bounds = {name: bounds(exact[name], [d.pop(name).double() for d in deviations], shapes.get(name))
                      for name in list(deviations[0])}
    deviations = None
    release_memory()

    # The kinks: each ambiguous decision's effect on the optimizer's results, fitted to each side's error.
    kinks = ambiguous_kinks(exact_decisions, simulated_decisions)
    fitted_names = optimizer_results(meta, start)
    sample = Sampler(exact, fitted_names)
    weight = (1.0 / sample(element_bounds)).nan_to_num(posinf=0.0)
    effect = OptimizerEffect(meta, start, grads64)
    effects = [sample(effect(kink_gradient(exact_decisions, named64, kink))) for kink in kinks]
    print(f"step {step}: {len(kinks)} ReLU or max-pool decisions within {KINK_FACTOR:g} x the simulated spread "
          f"of their input")

    # Each side's error, fitted by the kinks' effects (each taken or not) and the trust ratios' changes
    # (free, then held to their bound); what remains is held to the elements' bounds.
    sides = {"C++": end, "PyTorch": fp32}
    worst = {side: (0.0, "") for side in sides}
    ratio_columns = trust.columns(sample)
    boxed = [True] * len(effects) + [False] * len(ratio_columns)
    references = {}
    for side, result in sides.items():
        solution = fit(sample(result) - sample(exact), weight,
                       effects + ratio_columns, boxed)
        flips = solution[:len(effects)]
        taken = [kink for kink, c in zip(kinks, flips) if c > 0.5]
        base = exact
        if taken:  # the step again in float64 with those decisions the other way: their joint effect
            base = one_step(meta, start, x1, x2, step, torch.float64, decisions=Decisions(exact_decisions.flipped(taken))).state
        changes = trust.changes(result, base)
        for param, change in zip(trust.updates, changes):
            r = abs(change) / ratio_bounds[param]
            report.append((step, "trust ratio " + param, side, r))
            if not r <= 1.0:
                print(f"{param}: {side}'s trust ratio {1 + change:.8f} x float64's; bound {ratio_bounds[param]:.2e}")
                failures += 1
        references[side] = trust.apply(base, changes)
        print(f"step {step}: {side} took {sum(c > 0.5 for c in flips)} of them the other way")

    for name, value in exact.items():
        if not value.is_floating_point():
            for side, result in sides.items():
                if not torch.equal(result[name].to(torch.int64), value.to(torch.int64)):
                    print(f"{name}: {side} {result[name].tolist()} vs {value.tolist()}")
                    failures += 1
            continue
        bound = element_bounds[name]
        for side, result in sides.items():
            got, want = result[name].double(), references[side][name]
            ratio = ((got - want).abs() / bound).nan_to_num(nan=0.0, posinf=math.inf)
            where = ratio.argmax()
            r = ratio.flatten()[where].item()
            report.append((step, name, side, r))
            if r > worst[side][0]:
                worst[side] = (r, name)
            if not r <= 1.0:
                i = list(np.unravel_index(where.item(), value.shape)) if value.dim() else []
                print(f"{name}{i}: {side} {got.flatten()[where].item():.8g}, float64 {want.flatten()[where].item():.8g}, "
                      f"|error| {(got - want).abs().flatten()[where].item():.2e} = {r:.1f} x the bound "
                      f"{bound.flatten()[where].item():.2e}")
                failures += 1
    print(f"step {step}: {len(exact)} tensors; largest |error| / bound: C++ {worst['C++'][0]:.2f} ({worst['C++'][1]}), "
          f"PyTorch fp32 {worst['PyTorch'][0]:.2f} ({worst['PyTorch'][1]})")
    return failures


def main():
    tool, optimizer = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "lars"
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([tool, folder, optimizer], check=True)
        with open(os.path.join(folder, "index.json")) as f:
            index = json.load(f)
        meta, tensors = index["meta"], read_tensors(folder, index["tensors"])
    torch.set_num_threads(1)
    print(f"OpenBLAS kernels: {core_name()}; {MC_RUNS} runs with fp32's rounding simulated, bound "
          f"{BOUND_FACTOR:g} x their spread")

    def state(prefix):
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

    steps = meta["steps"]
    states = [state("before/")] + [state(f"after_{s}/") for s in steps[:-1]] + [state("after/")]
    if any(not s for s in states):
        print("the tool wrote no state between its steps (after_<step>/): rebuild moco_v3_step_tool")
        return 1
    if meta["optimizer"] == "adamw" and any("optimizer/steps" not in s for s in states):
        print("names differ: C++'s state holds no optimizer/steps (AdamW's step count, t of its bias corrections)")
        return 1
    if meta.get("arch") == "vit_tiny_cpu" and not meta["predictor_last_bn"]:
        print("the ViT run's predictor lacks the official MoCo_ViT's last BatchNorm (predictor_last_bn)")
        return 1
    failures = 0
    if "encoder_q/pos_embed" in states[0]:  # the fixed embedding, as vits.py builds it (the C++ one loaded above)
        expected_pos = sincos_position_embedding(meta["image_size"] // meta["patch_size"], meta["embed_dim"])
        pos_diff = (states[0]["encoder_q/pos_embed"] - expected_pos).abs().max().item()
        print(f"pos_embed: max |diff| against vits.py's formula {pos_diff:.2e}")
        if not pos_diff <= POS_EMBED_TOLERANCE:
            failures += 1
    report = []
    for i, (step, cxx_loss) in enumerate(zip(steps, meta["losses"])):
        x1, x2 = tensors[f"input/x1_{step}"], tensors[f"input/x2_{step}"]
        failures += check_step(meta, states[i], states[i + 1], x1, x2, step, cxx_loss, report)
    if os.environ.get("MOCO_PARITY_REPORT"):  # every tensor's ratio, for tables
        with open(os.environ["MOCO_PARITY_REPORT"], "w") as f:
            json.dump(report, f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
