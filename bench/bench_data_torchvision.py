#!/usr/bin/python3
"""The official MoCo v2 two-view transform (main_moco.py, aug+) with torchvision + PIL on one
thread, on the same files as build/bench_data: images per second.

usage: bench/bench_data_torchvision.py DIR [--rounds N] [--make N]
--make N first writes N ImageNet-like JPEGs into DIR: 4:3 windows of python3-skimage's sample
photographs resized to 500x375, quality 90.
"""
import argparse
import glob
import os
import random
import time

import torch
import torchvision
import torchvision.transforms as T
from PIL import Image, ImageFilter


class GaussianBlur:  # moco/loader.py
    def __init__(self, sigma=(0.1, 2.0)):
        self.sigma = sigma

    def __call__(self, x):
        return x.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.sigma[0], self.sigma[1])))


def make_corpus(out, n):
    import numpy as np
    import skimage.data

    photos = [Image.fromarray(getattr(skimage.data, name)()) for name in ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry")]
    rng = np.random.default_rng(0)
    os.makedirs(out, exist_ok=True)
    for i in range(n):
        im = photos[i % len(photos)]
        w, h = im.size
        cw = int(min(w, h * 4 / 3) * rng.uniform(0.6, 1))
        ch = int(cw * 3 / 4)
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        im.crop((x, y, x + cw, y + ch)).resize((500, 375), Image.BILINEAR).save(os.path.join(out, f"{i:04d}.jpg"), quality=90)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--make", type=int, default=0)
    a = p.parse_args()
    if a.make:
        make_corpus(a.dir, a.make)
    torch.set_num_threads(1)
    aug = T.Compose([
        T.RandomResizedCrop(224, scale=(0.2, 1.0)),
        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([GaussianBlur([0.1, 2.0])], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    files = sorted(f for f in glob.glob(os.path.join(a.dir, "*")) if f.lower().endswith((".jpg", ".jpeg")))
    start = time.time()
    for _ in range(a.rounds):
        for f in files:
            with open(f, "rb") as fh:
                img = Image.open(fh).convert("RGB")
            aug(img), aug(img)
    print(f"torchvision {torchvision.__version__} + PIL: {a.rounds * len(files) / (time.time() - start):.1f} images/s "
          f"(decode + two v2 views at 224, one thread, {len(files)} files x {a.rounds})")


if __name__ == "__main__":
    main()
