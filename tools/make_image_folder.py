#!/usr/bin/python3
"""Writes a small ImageFolder for tests and configs/imagefolder_quick.yaml (Debian's /usr/bin/python3
with python3-pil; numpy): OUT/train/<class>/*.{jpg,png} and OUT/val/<class>/*, images of varied
sizes whose class is a colour and texture, so a kNN on them can learn something.

usage: make_image_folder.py OUT [--classes 4] [--train 24] [--val 8] [--corrupt 0] [--seed 0] [--sides 48 160]
                             [--pool P]
--corrupt K adds K broken files to train/ (a truncated JPEG, a text file named .jpg, ...).
--pool P encodes P JPEGs per class and writes each file as a copy of one of them: ImageNet's 1.28M
files in minutes (bench/start_at_scale.sh), e.g. --classes 1000 --train 1281 --val 50 --sides 32 48 --pool 4.
"""
import argparse
import io
import os

import numpy as np
from PIL import Image


def image(rng, label, classes, sides):
    h, w = int(rng.integers(sides[0], sides[1])), int(rng.integers(sides[0], sides[1]))
    hue = label / classes
    base = np.array([np.cos(2 * np.pi * (hue + k / 3)) * 0.5 + 0.5 for k in range(3)]) * 200 + 20
    y, x = np.mgrid[0:h, 0:w]
    period = 6 + 4 * label
    texture = np.sin(2 * np.pi * (x * np.cos(label) + y * np.sin(label)) / period)[..., None] * 30
    noise = rng.normal(0, 12, (h, w, 3))
    return np.clip(base + texture + noise, 0, 255).astype(np.uint8)


def pooled(a, rng):
    """Every file a copy of one of a.pool JPEGs of its class: the folder's shape at its size, fast."""
    for c in range(a.classes):
        pool = []
        for _ in range(a.pool):
            buf = io.BytesIO()
            Image.fromarray(image(rng, c, a.classes, a.sides)).save(buf, "JPEG", quality=85)
            pool.append(buf.getvalue())
        for split, n in (("train", a.train), ("val", a.val)):
            folder = os.path.join(a.out, split, f"n{c:08d}")
            os.makedirs(folder, exist_ok=True)
            for i in range(n):
                with open(os.path.join(folder, f"n{c:08d}_{i}.JPEG"), "wb") as f:
                    f.write(pool[i % a.pool])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--train", type=int, default=24, help="images per class in train/")
    p.add_argument("--val", type=int, default=8, help="images per class in val/")
    p.add_argument("--corrupt", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sides", type=int, nargs=2, default=(48, 160), help="range of image heights and widths in pixels")
    p.add_argument("--pool", type=int, default=0, help="JPEGs encoded per class, each file a copy of one (0: every file its own)")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    if a.pool:
        return pooled(a, rng)
    for split, n in (("train", a.train), ("val", a.val)):
        for c in range(a.classes):
            folder = os.path.join(a.out, split, f"class_{c:02d}")
            os.makedirs(folder, exist_ok=True)
            for i in range(n):
                pixels = image(rng, c, a.classes, a.sides)
                if i % 4 == 3:
                    Image.fromarray(pixels).save(os.path.join(folder, f"{i:04d}.png"))
                elif i % 8 == 5:  # a greyscale JPEG: decoded to RGB like the rest
                    Image.fromarray(pixels).convert("L").save(os.path.join(folder, f"{i:04d}.JPEG"), quality=90)
                else:
                    Image.fromarray(pixels).save(os.path.join(folder, f"{i:04d}.jpg"), quality=int(rng.integers(60, 96)))
    for k in range(a.corrupt):
        folder = os.path.join(a.out, "train", f"class_{k % a.classes:02d}")
        path = os.path.join(folder, f"corrupt_{k}.jpg")
        if k % 2 == 0:
            with open(os.path.join(folder, "0000.jpg"), "rb") as f:
                data = f.read()
            open(path, "wb").write(data[: len(data) // 3])  # truncated JPEG
        else:
            open(path, "w").write("not an image\n")


if __name__ == "__main__":
    main()
