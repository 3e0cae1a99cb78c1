#!/usr/bin/python3
"""Parity of the v1/v2 augmentations with torchvision (run with Debian's /usr/bin/python3).

Builds test images in a temporary folder (the sample photographs of python3-skimage, re-encoded as
JPEG at several sizes and qualities and decoded by PIL, plus generated ones: noise, gradients, flat
colours, saturated primaries, greyscale, tiny), runs the C++ tool on them, which draws parameters
and writes every operation's result, redoes each with torchvision.transforms.functional on uint8
tensors (antialias=True) and requires, per output, >= 99.9% of pixels within one uint8 level.

usage: augment_parity.py TOOL [--cases N] [--keep DIR]
"""
import argparse
import collections
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image

MIN_SHARE = 0.999


def photos():
    """(name, HxWxC uint8) of the bundled skimage photographs; none is downloaded."""
    import skimage.data

    out = []
    for name in ("astronaut", "chelsea", "coffee", "rocket", "camera", "immunohistochemistry"):
        try:
            out.append((name, np.asarray(getattr(skimage.data, name)())))
        except Exception as e:  # a sample missing from this skimage: say so, use the rest
            print(f"note: skimage.data.{name} unavailable ({e})", file=sys.stderr)
    if len(out) < 3:
        sys.exit("fewer than 3 skimage sample photographs available: install python3-skimage")
    return out


def reencoded(name, pixels, encoded):
    """The photograph at two sizes and two JPEG qualities, as PIL decodes it; the JPEG bytes go to
    encoded[variant] (and a PNG of the smaller size), for the decoders' own check."""
    image = Image.fromarray(pixels)
    for long_side in (500, 333):
        scale = long_side / max(image.size)
        resized = image.resize((max(1, round(image.size[0] * scale)), max(1, round(image.size[1] * scale))), Image.BILINEAR)
        for quality in (90, 50):
            buffer = io.BytesIO()
            resized.save(buffer, format="JPEG", quality=quality)
            decoded = np.asarray(Image.open(io.BytesIO(buffer.getvalue())))
            encoded[f"{name}_{long_side}_q{quality}.jpg"] = buffer.getvalue()
            yield f"{name}_{long_side}_q{quality}", decoded
        buffer = io.BytesIO()
        resized.save(buffer, format="PNG")
        encoded[f"{name}_{long_side}.png"] = buffer.getvalue()


def decoder_cases(name, pixels):
    """(file name, bytes): the photograph as JPEGs of every chroma layout PIL writes (4:4:4, 4:2:2,
    4:2:0), progressive, greyscale and of odd sizes, for the decoders' check alone."""
    image = Image.fromarray(pixels).convert("RGB")
    odd = image.resize((image.size[0] // 3 | 1, image.size[1] // 3 | 1), Image.BILINEAR)
    variants = [
        ("444", image, dict(quality=90, subsampling=0)),
        ("422", image, dict(quality=90, subsampling=1)),
        ("420", image, dict(quality=75, subsampling=2)),
        ("progressive420", image, dict(quality=85, subsampling=2, progressive=True)),
        ("progressive444", odd, dict(quality=95, subsampling=0, progressive=True)),
        ("odd420", odd, dict(quality=60, subsampling=2)),
        ("gray", image.convert("L"), dict(quality=90)),
    ]
    for label, im, options in variants:
        buffer = io.BytesIO()
        im.save(buffer, format="JPEG", **options)
        yield f"{name}_{label}.jpg", buffer.getvalue()


def generated():
    rng = np.random.default_rng(7)
    yield "noise_rgb", rng.integers(0, 256, (120, 90, 3), dtype=np.uint8)
    y, x = np.mgrid[0:200, 0:300]
    yield "gradient_rgb", np.stack([x * 255 // 299, y * 255 // 199, (x + y) * 255 // 498], -1).astype(np.uint8)
    flat = np.zeros((64, 80, 3), np.uint8)
    flat[:, :20] = (200, 30, 30)
    flat[:, 20:40] = (30, 200, 30)
    flat[:, 40:60] = (30, 30, 200)
    flat[:, 60:] = (128, 128, 128)  # max == min: the hue's grey branch
    yield "primaries", flat
    yield "saturated", np.stack([np.full((50, 50), 255), np.zeros((50, 50)), np.full((50, 50), 255)], -1).astype(np.uint8)
    yield "noise_gray", rng.integers(0, 256, (77, 101), dtype=np.uint8)
    yield "tiny_rgb", rng.integers(0, 256, (9, 13, 3), dtype=np.uint8)


def write_raw(path, pixels):
    chw = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    chw = np.ascontiguousarray(chw, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(np.array(chw.shape, dtype="<i4").tobytes())
        f.write(chw.tobytes())


def read_raw(path):
    with open(path, "rb") as f:
        shape = np.frombuffer(f.read(12), dtype="<i4")
        return torch.from_numpy(np.frombuffer(f.read(), dtype=np.uint8).reshape(shape).copy())


def jitter(img, p):
    for op in p["order"]:
        if op == 0:
            img = F.adjust_brightness(img, p["brightness"])
        elif op == 1:
            img = F.adjust_contrast(img, p["contrast"])
        elif op == 2:
            img = F.adjust_saturation(img, p["saturation"])
        elif op == 3 and p["hue"] != 0:
            img = F.adjust_hue(img, p["hue"])
    return img


def gray(img):
    return F.rgb_to_grayscale(img, num_output_channels=img.shape[0])


def crop(img, p):
    top, left, h, w = p["box"]
    return F.resized_crop(img, top, left, h, w, [p["size"], p["size"]], interpolation=F.InterpolationMode.BILINEAR, antialias=True)


def v1(img, p):
    img = crop(img, p)
    if p["grayscale"]:
        img = gray(img)
    img = jitter(img, p)
    return F.hflip(img) if p["flip"] else img


def v2(img, p):
    img = crop(img, p)
    if p["jitter"]:
        img = jitter(img, p)
    if p["grayscale"]:
        img = gray(img)
    if p["blur"]:
        k = p["kernel_view"]
        img = F.gaussian_blur(img, [k, k], [p["sigma"], p["sigma"]])
    return F.hflip(img) if p["flip"] else img


OPS = {
    "crop": crop,
    "brightness": lambda x, p: F.adjust_brightness(x, p["brightness"]),
    "contrast": lambda x, p: F.adjust_contrast(x, p["contrast"]),
    "saturation": lambda x, p: F.adjust_saturation(x, p["saturation"]),
    "hue": lambda x, p: F.adjust_hue(x, p["hue"]),
    "jitter": jitter,
    "grayscale": lambda x, p: gray(x),
    "blur": lambda x, p: F.gaussian_blur(x, [p["kernel_image"]] * 2, [p["sigma"]] * 2),
    "flip": lambda x, p: F.hflip(x),
    "eval": lambda x, p: F.center_crop(F.resize(x, round(p["size"] * 256 / 224), antialias=True), p["size"]),
    "v1": v1,
    "v2": v2,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("--cases", type=int, default=4)
    parser.add_argument("--keep", help="write the images and results here instead of a temporary folder")
    args = parser.parse_args()
    torch.set_num_threads(1)

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        in_dir, out_dir = os.path.join(root, "in"), os.path.join(root, "out")
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        count = 0
        encoded = {}
        for name, pixels in photos():
            encoded.update(decoder_cases(name, pixels))
            for variant, decoded in reencoded(name, pixels, encoded):
                write_raw(os.path.join(in_dir, variant + ".u8"), decoded)
                count += 1
        for name, pixels in generated():
            write_raw(os.path.join(in_dir, name + ".u8"), pixels)
            count += 1
        for file_name, data in encoded.items():
            open(os.path.join(in_dir, file_name), "wb").write(data)
        subprocess.run([args.tool, in_dir, out_dir, str(args.cases)], check=True)

        # The decoders against PIL's (torchvision's loader): Image.open(...).convert("RGB"). Both use
        # libjpeg-turbo's default path (ISLOW DCT, fancy upsampling), so every pixel must be equal.
        failures = []
        exact_decodes = 0
        for file_name, data in encoded.items():
            ours = read_raw(os.path.join(out_dir, file_name + ".decoded.u8")).numpy().transpose(1, 2, 0)
            theirs = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            if ours.shape != theirs.shape:
                failures.append(f"decode {file_name}: shape {ours.shape} vs PIL {theirs.shape}")
                continue
            diff = np.abs(ours.astype(int) - theirs.astype(int))
            exact_decodes += int(diff.max() == 0)
            if diff.max() != 0:
                failures.append(f"decode {file_name}: {100 * (diff == 0).mean():.3f}% of values equal to PIL's (max diff {diff.max()})")
        print(f"{len(encoded)} JPEG/PNG files decoded, {exact_decodes} bit for bit as PIL decodes them")

        stats = collections.defaultdict(lambda: [0, 0, 0, 0, 1.0])  # outputs, pixels, exact, within 1, worst share
        rows = [json.loads(line) for line in open(os.path.join(out_dir, "params.jsonl"))]
        for p in rows:
            image = read_raw(os.path.join(in_dir, p["image"] + ".u8"))
            stem = os.path.join(out_dir, f"{p['image']}.{p['case']}.")
            for op, fn in OPS.items():
                ours = read_raw(stem + op + ".u8")
                theirs = fn(image, p)
                if ours.shape != theirs.shape:
                    failures.append(f"{p['image']} case {p['case']} {op}: shape {tuple(ours.shape)} vs torchvision {tuple(theirs.shape)}")
                    continue
                diff = (ours.int() - theirs.int()).abs()
                share = (diff <= 1).double().mean().item()
                s = stats[op]
                s[0] += 1
                s[1] += diff.numel()
                s[2] += (diff == 0).sum().item()
                s[3] += (diff <= 1).sum().item()
                s[4] = min(s[4], share)
                if share < MIN_SHARE:
                    failures.append(f"{p['image']} case {p['case']} {op}: {100 * share:.3f}% within 1 level (max diff {diff.max().item()}), params {p}")
                if op == "v2":
                    floats = torch.from_numpy(np.fromfile(stem + "v2.f32", dtype=np.float32).reshape(theirs.shape))
                    expected = F.normalize(theirs.float() / 255, p["mean"], p["std"])
                    tol = 1.0 / 255 / min(p["std"]) + 1e-4
                    fshare = ((floats - expected).abs() <= tol).double().mean().item()
                    if fshare < MIN_SHARE:
                        failures.append(f"{p['image']} case {p['case']} normalised v2: {100 * fshare:.3f}% within one level")
        print(f"{count} images, {len(rows)} parameter sets")
        print(f"{'op':<11} {'outputs':>7} {'pixels':>11} {'exact %':>9} {'<=1 %':>9} {'worst <=1 %':>12}")
        for op in OPS:
            n, px, exact, within, worst = stats[op]
            if n:
                print(f"{op:<11} {n:>7} {px:>11} {100 * exact / px:>9.4f} {100 * within / px:>9.4f} {100 * worst:>12.4f}")
        missing = [op for op in OPS if not stats[op][0]]
        if missing:
            failures.append(f"no output compared for {missing}")
        for f in failures[:20]:
            print("FAIL:", f)
        if failures:
            print(f"{len(failures)} output(s) differ from torchvision by more than one level on over {100 * (1 - MIN_SHARE):.1f}% of pixels")
            return 1
        print("every output within one uint8 level of torchvision on >= 99.9% of pixels")
        return 0


if __name__ == "__main__":
    sys.exit(main())
