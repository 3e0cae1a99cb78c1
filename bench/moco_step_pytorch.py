#!/usr/bin/env python3
"""The MoCo v2 training step the way the official code takes it (facebookresearch/moco:
main_moco.py, moco/builder.py), for bench_gpu to be read against, on one GPU:

- torchvision's ResNet-50 with the v2 MLP head, query and key encoders, the queue as a buffer;
- the model wrapped in DistributedDataParallel (a world of one over NCCL), shuffle-BN through
  all_gather and a broadcast permutation, keys gathered before the enqueue;
- torch.autocast("cuda", bfloat16) around forward and loss, SGD (momentum 0.9, weight decay 1e-4),
  cudnn.benchmark, optionally channels-last (on by default, as bench_gpu's);
- synthetic images already on the device.

Prints img/s and writes a JSON file. tools/gpu_check.sh runs it beside build/bench_gpu.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def gather(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


class MoCo(nn.Module):
    def __init__(self, arch="resnet50", dim=128, queue_size=65536, momentum=0.999, temperature=0.2):
        super().__init__()
        self.queue_size, self.momentum, self.temperature = queue_size, momentum, temperature
        self.encoder_q, self.encoder_k = self.encoder(arch, dim), self.encoder(arch, dim)
        for q, k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            k.data.copy_(q.data)
            k.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(dim, queue_size), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @staticmethod
    def encoder(arch, dim):
        net = getattr(torchvision.models, arch)(num_classes=dim)
        hidden = net.fc.weight.shape[1]
        net.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), net.fc)
        return net

    @torch.no_grad()
    def momentum_update(self):
        for q, k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            k.data = k.data * self.momentum + q.data * (1.0 - self.momentum)

    @torch.no_grad()
    def enqueue(self, keys):
        keys = gather(keys)
        n, ptr = keys.shape[0], int(self.queue_ptr)
        self.queue[:, ptr:ptr + n] = keys.T
        self.queue_ptr[0] = (ptr + n) % self.queue_size

    @torch.no_grad()
    def shuffle(self, x):
        everything = gather(x)
        order = torch.randperm(everything.shape[0], device=x.device)
        dist.broadcast(order, src=0)
        mine = order.view(dist.get_world_size(), -1)[dist.get_rank()]
        return everything[mine], torch.argsort(order)

    @torch.no_grad()
    def unshuffle(self, x, restore):
        everything = gather(x)
        mine = restore.view(dist.get_world_size(), -1)[dist.get_rank()]
        return everything[mine]

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self.momentum_update()
            shuffled, restore = self.shuffle(im_k)
            k = self.unshuffle(F.normalize(self.encoder_k(shuffled), dim=1), restore)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.temperature
        labels = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        self.enqueue(k)
        return logits, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: a smoke test of this script (gloo, no autocast), not a benchmark")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--queue-size", type=int, default=65536)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--channels-last", choices=["true", "false"], default="true")
    parser.add_argument("--json", default="bench_gpu_pytorch.json")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if not cuda:
        args.precision = "fp32"  # the smoke test runs without autocast
    if cuda and not torch.cuda.is_available():
        raise SystemExit("moco_step_pytorch: no CUDA device")
    channels_last = args.channels_last == "true"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    if cuda:
        torch.cuda.set_device(0)
        torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    model = MoCo(args.arch, queue_size=args.queue_size).to(device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()
    images = [torch.randn(args.batch, 3, args.image, args.image, device=device).contiguous(memory_format=memory_format)
              for _ in range(2)]
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    losses = []

    def step():
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=cuda and args.precision == "bf16"):
            logits, labels = model(images[0], images[1])
            loss = criterion(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item() if not cuda else 0.0)

    for _ in range(args.warmup):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize()
    rate = args.batch * args.steps / (time.perf_counter() - start)
    if not cuda and not all(map(lambda x: x == x and 0 < x < 100, losses)):
        raise SystemExit("moco_step_pytorch: implausible losses %s" % losses)
    result = {"impl": "pytorch", "torch": torch.__version__, "device": args.device, "arch": args.arch,
              "image": args.image, "batch": args.batch,
              "queue_size": args.queue_size, "precision": args.precision, "channels_last": channels_last,
              "steps": args.steps, "img_per_s": rate}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print("pytorch: %.1f img/s (%s %dpx, batch %d, %s%s, %s)" % (
        rate, args.arch, args.image, args.batch, args.precision, ", channels-last" if channels_last else "", args.device))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
