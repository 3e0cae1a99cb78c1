#!/usr/bin/python3
"""Parity of the v1/v2/v3 augmentations with torchvision (run with Debian's /usr/bin/python3).

Builds test images in a temporary folder (the sample photographs of python3-skimage, re-encoded as
JPEG at several sizes and qualities and decoded by PIL, plus generated ones: noise, gradients, flat
colours, saturated primaries, greys, a colour cube, 1-px lines, tiny), runs the C++ tool on them,
which draws parameters and writes every operation's result, and redoes each with
torchvision.transforms.functional:
- the tensor path (OPS) on uint8 tensors (antialias=True): per output >= 99.9% of pixels within one
  uint8 level;
- the PIL path (PIL_OPS) on PIL images (Image.fromarray of the same pixels), as the official
  main_moco.py runs them, each op and the whole v1, v2, v3 and evaluation views (data.transforms: pil),
  and v2 after ToTensor + Normalize: every pixel equal, unless the row states why not and its bound;
- v3's asymmetric pair (PAIRS): both views of each image as the loader draws them (moco-v3's
  augmentation1 and augmentation2: blur p 1.0 / 0.1, Solarize p 0 / 0.2), each replayed through
  torchvision and ImageOps.solarize on a PIL image, the uint8 view and its ToTensor + Normalize
  floats bit for bit; the first view must blur always and never solarize.
It prints, per path and op, the share of exact pixels and the largest difference.

usage: augment_parity.py TOOL [--cases N] [--colour-cases N] [--keep DIR]
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
from PIL import Image, ImageFilter, ImageOps

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
    # 16-bit greyscale PNGs: PIL reads them as mode I and convert("RGB") clips at 255 (not the high
    # byte): grey x 2 (half the values above 255) and grey x 257 (the full 16-bit range).
    grey = np.asarray(odd.convert("L")).astype(np.uint16)
    for label, values in (("grey16_x2", grey * 2), ("grey16_full", grey * 257)):
        buffer = io.BytesIO()
        Image.fromarray(values).save(buffer, format="PNG")
        yield f"{name}_{label}.png", buffer.getvalue()


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
    yield "line_1px_high", rng.integers(0, 256, (1, 57, 3), dtype=np.uint8)
    yield "line_1px_wide", rng.integers(0, 256, (43, 1, 3), dtype=np.uint8)
    yield "line_1px_gray", rng.integers(0, 256, (1, 31), dtype=np.uint8)
    yield "grey_rgb", np.repeat(np.arange(256, dtype=np.uint8).reshape(16, 16, 1), 3, axis=2)  # r = g = b
    pure = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 255, 255), (255, 255, 0), (255, 0, 255), (255, 255, 255), (0, 0, 0)]
    yield "pure_primaries", np.repeat(np.array(pure, np.uint8)[None], 8, axis=0).repeat(8, axis=1)
    levels = np.round(np.arange(64) * 255 / 63).astype(np.uint8)  # 64 levels per channel, 0 and 255 included
    r, g, b = np.meshgrid(levels, levels, levels, indexing="ij")
    yield "colour_cube", np.stack([r, g, b], -1).reshape(512, 512, 3)


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
    return F.rgb_to_grayscale(img, num_output_channels=F.get_dimensions(img)[0])  # RandomGrayscale's rule


def crop(img, p):
    top, left, h, w = p["box"]
    return F.resized_crop(img, top, left, h, w, [p["size"], p["size"]], interpolation=F.InterpolationMode.BILINEAR, antialias=True)


def tensor_blur(img, p):
    k = p["kernel_view"]
    return F.gaussian_blur(img, [k, k], [p["sigma"], p["sigma"]])


def pil_crop(img, p):
    return F.resized_crop(img, *p["box"], [p["size"], p["size"]], interpolation=F.InterpolationMode.BILINEAR)


def pil_blur(img, p):
    """moco.loader.GaussianBlur: ImageFilter.GaussianBlur(radius=sigma)."""
    return img.filter(ImageFilter.GaussianBlur(radius=p["sigma"]))


def tensor_solarize(img, p):
    return F.solarize(img, 128)


def pil_solarize(img, p):
    """moco-v3's moco.loader.Solarize: ImageOps.solarize(x), its threshold the default 128."""
    return ImageOps.solarize(img)


def v1(img, p, crop=crop):
    """main_moco.py's v1: RandomResizedCrop, RandomGrayscale, ColorJitter, RandomHorizontalFlip."""
    img = crop(img, p)
    if p["grayscale"]:
        img = gray(img)
    img = jitter(img, p)
    return F.hflip(img) if p["flip"] else img


def v2(img, p, crop=crop, blur=tensor_blur):
    """main_moco.py's aug+: crop, RandomApply(ColorJitter), RandomGrayscale, RandomApply(blur), flip."""
    img = crop(img, p)
    if p["jitter"]:
        img = jitter(img, p)
    if p["grayscale"]:
        img = gray(img)
    if p["blur"]:
        img = blur(img, p)
    return F.hflip(img) if p["flip"] else img


def v3(img, p, crop=crop, blur=tensor_blur, solarize=tensor_solarize):
    """moco-v3's main_moco.py augmentation1/2: v2's steps, then RandomApply(Solarize), then the flip."""
    img = crop(img, p)
    if p["jitter"]:
        img = jitter(img, p)
    if p["grayscale"]:
        img = gray(img)
    if p["blur"]:
        img = blur(img, p)
    if p["solarize"]:
        img = solarize(img, p)
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
    "solarize": tensor_solarize,
    "eval": lambda x, p: F.center_crop(F.resize(x, round(p["size"] * 256 / 224), antialias=True), p["size"]),
    "v1": v1,
    "v2": v2,
    "v3": v3,
}


class PilOp:
    """A row of the PIL path: fn(PIL image, params) -> PIL image, and the largest difference allowed
    (0: bit-exact; otherwise `why` says why it cannot be exact)."""

    def __init__(self, fn, max_diff=0, why=""):
        assert max_diff == 0 or why, "an inexact row must say why"
        self.fn, self.max_diff, self.why = fn, max_diff, why


def pil_v1(img, p):
    return v1(img, p, pil_crop)


def pil_v2(img, p):
    return v2(img, p, pil_crop, pil_blur)


def pil_v3(img, p):
    return v3(img, p, pil_crop, pil_blur, pil_solarize)


# The same names as the C++ tool's pil_ops(); jitter and gray dispatch on PIL images as they do on tensors.
PIL_OPS = {
    "brightness": PilOp(lambda x, p: F.adjust_brightness(x, p["brightness"])),
    "contrast": PilOp(lambda x, p: F.adjust_contrast(x, p["contrast"])),
    "saturation": PilOp(lambda x, p: F.adjust_saturation(x, p["saturation"])),
    "hue": PilOp(lambda x, p: F.adjust_hue(x, p["hue"])),
    "jitter": PilOp(jitter),
    "grayscale": PilOp(lambda x, p: gray(x)),
    "resized_crop": PilOp(pil_crop),
    "blur": PilOp(pil_blur),
    "flip": PilOp(lambda x, p: F.hflip(x)),
    "solarize": PilOp(pil_solarize),
    # main_lincls.py's val transform (Resize's default interpolation is bilinear).
    "eval": PilOp(lambda x, p: F.center_crop(F.resize(x, round(p["size"] * 256 / 224)), p["size"])),
    "v1": PilOp(pil_v1),
    "v2": PilOp(pil_v2),
    "v3": PilOp(pil_v3),
}


def to_pil(chw):
    a = chw.numpy()
    return Image.fromarray(a[0] if a.shape[0] == 1 else np.ascontiguousarray(a.transpose(1, 2, 0)))


def from_pil(img):
    a = np.array(img)  # a writable copy, as torch.from_numpy wants
    return torch.from_numpy(np.ascontiguousarray(a[None] if a.ndim == 2 else a.transpose(2, 0, 1)))


class Diff:
    """|ours - theirs| of one output as a histogram (one pass, a fraction of separate reductions' time
    on 48M-pixel images): pixels, exact, within one level, largest."""

    def __init__(self, ours, theirs):
        if ours.dtype == theirs.dtype == torch.uint8:  # |a - b| in uint8: a quarter of int32's memory traffic
            diff = torch.maximum(ours, theirs) - torch.minimum(ours, theirs)
        else:
            diff = (ours.int() - theirs.int()).abs()
        counts = torch.bincount(diff.flatten(), minlength=2)
        self.pixels = diff.numel()
        self.exact, self.within = counts[0].item(), counts[:2].sum().item()
        self.largest = counts.nonzero().max().item() if self.pixels else 0

    def share_within(self):
        return self.within / self.pixels if self.pixels else 1.0

    def exact_percent(self):
        return 100 * self.exact / self.pixels if self.pixels else 100.0


class Stats:
    """Per (path, op): outputs, pixels, exact, within one level, the worst output's share within one
    level, the largest difference."""

    def __init__(self):
        self.rows = collections.defaultdict(lambda: [0, 0, 0, 0, 1.0, 0])

    def add(self, key, diff):
        s = self.rows[key]
        s[0] += 1
        s[1] += diff.pixels
        s[2] += diff.exact
        s[3] += diff.within
        s[4] = min(s[4], diff.share_within())
        s[5] = max(s[5], diff.largest)

    def print(self, keys):
        print(f"{'path':<7} {'op':<11} {'outputs':>7} {'pixels':>11} {'exact %':>9} {'<=1 %':>9} {'worst <=1 %':>12} {'max diff':>8}")
        for key in keys:
            n, px, exact, within, worst, largest = self.rows[key]
            if n:
                print(f"{key[0]:<7} {key[1]:<11} {n:>7} {px:>11} {100 * exact / px:>9.4f} {100 * within / px:>9.4f} {100 * worst:>12.4f} {largest:>8}")


def compare(key, ours, theirs, what, stats, failures):
    """Records ours vs theirs under key; returns their Diff, or None on a shape mismatch."""
    if ours.shape != theirs.shape:
        failures.append(f"{what}: shape {tuple(ours.shape)} vs torchvision {tuple(theirs.shape)}")
        return None
    diff = Diff(ours, theirs)
    stats.add(key, diff)
    return diff


def check_pil_path(p, image, stem, stats, failures, label="pil"):
    pil_image = to_pil(image)
    for op, row in PIL_OPS.items():
        path = stem + "pil." + op + ".u8"
        if not os.path.exists(path):
            failures.append(f"{p['image']} case {p['case']} pil {op}: the tool wrote no {os.path.basename(path)}")
            continue
        what = f"{p['image']} case {p['case']} pil {op}"
        diff = compare((label, op), read_raw(path), from_pil(row.fn(pil_image, p)), what, stats, failures)
        if diff is not None and diff.largest > row.max_diff:
            failures.append(f"{what}: {diff.exact_percent():.4f}% exact, max diff {diff.largest} > {row.max_diff}, params {p}")


def check_pil_normalised(p, image, stem, failures):
    """The PIL v2 view after ToTensor + Normalize, as main_moco.py's last two transforms: bit for bit."""
    theirs = F.normalize(F.to_tensor(pil_v2(to_pil(image), p)), p["mean"], p["std"])
    if theirs.dim() == 2:
        theirs = theirs[None]
    ours = torch.from_numpy(np.fromfile(stem + "pil.v2.f32", dtype=np.float32).reshape(theirs.shape))
    if not torch.equal(ours, theirs):
        failures.append(f"{p['image']} case {p['case']} pil normalised v2: {100 * (ours == theirs).double().mean().item():.4f}% equal, max diff {(ours - theirs).abs().max().item()}")


def normalised(view, p):
    """ToTensor + Normalize of a PIL view, C x S x S, as main_moco.py's last two transforms."""
    out = F.normalize(F.to_tensor(view), p["mean"], p["std"])
    return out[None] if out.dim() == 2 else out


def check_v3_pair(rows, in_dir, out_dir, stats, failures):
    """Both views of v3's pair as the tool drew them, replayed on a PIL image: the uint8 view and its
    normalised floats bit for bit. Returns (views, blurred, solarized) per view."""
    counts = {1: [0, 0, 0], 2: [0, 0, 0]}
    for p in rows:
        image = read_raw(os.path.join(in_dir, p["image"] + ".u8"))
        stem = os.path.join(out_dir, f"{p['image']}.{p['case']}.pil.v3_view{p['view']}.")
        what = f"{p['image']} case {p['case']} v3 view {p['view']}"
        theirs = pil_v3(to_pil(image), p)
        diff = compare(("pil", f"v3_view{p['view']}"), read_raw(stem + "u8"), from_pil(theirs), what, stats, failures)
        if diff is not None and diff.largest > 0:
            failures.append(f"{what}: {diff.exact_percent():.4f}% exact, max diff {diff.largest}, params {p}")
        expected = normalised(theirs, p)
        ours = torch.from_numpy(np.fromfile(stem + "f32", dtype=np.float32).reshape(expected.shape))
        if not torch.equal(ours, expected):
            failures.append(f"{what} normalised: {100 * (ours == expected).double().mean().item():.4f}% equal, max diff {(ours - expected).abs().max().item()}")
        c = counts[p["view"]]
        c[0], c[1], c[2] = c[0] + 1, c[1] + p["blur"], c[2] + p["solarize"]
    if counts[1][1] != counts[1][0] or counts[1][2] != 0:
        failures.append(f"v3 view 1 must blur always and never solarize (augmentation1): {counts[1]}")
    return counts


def all_colours():
    """Every 24-bit colour once, as a 4096 x 4096 image (R = index >> 16, G, B the lower bytes)."""
    i = np.arange(1 << 24, dtype=np.uint32)
    return np.stack([(i >> 16) & 255, (i >> 8) & 255, i & 255], -1).astype(np.uint8).reshape(4096, 4096, 3)


def check_all_colours(tool, root, cases, stats, failures):
    """The PIL rows once more, on every 24-bit colour (the tool's --pil-only run)."""
    in_dir, out_dir = os.path.join(root, "colours_in"), os.path.join(root, "colours_out")
    os.makedirs(in_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    write_raw(os.path.join(in_dir, "all_colours.u8"), all_colours())
    subprocess.run([tool, in_dir, out_dir, str(cases), "--pil-only"], check=True)
    image = read_raw(os.path.join(in_dir, "all_colours.u8"))
    for line in open(os.path.join(out_dir, "params.jsonl")):
        p = json.loads(line)
        check_pil_path(p, image, os.path.join(out_dir, f"{p['image']}.{p['case']}."), stats, failures, "pil-all")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("--cases", type=int, default=4)
    # Every 24-bit colour is one 4096x4096 image: each draw of it costs as much as all the other images'
    # four, and the colours, not the draws, are what it adds.
    parser.add_argument("--colour-cases", type=int, default=2)
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

        stats = Stats()
        rows = [json.loads(line) for line in open(os.path.join(out_dir, "params.jsonl"))]
        for p in rows:
            image = read_raw(os.path.join(in_dir, p["image"] + ".u8"))
            stem = os.path.join(out_dir, f"{p['image']}.{p['case']}.")
            for op, fn in OPS.items():
                what = f"{p['image']} case {p['case']} {op}"
                theirs = fn(image, p)
                diff = compare(("tensor", op), read_raw(stem + op + ".u8"), theirs, what, stats, failures)
                if diff is None:
                    continue
                if diff.share_within() < MIN_SHARE:
                    failures.append(f"{what}: {100 * diff.share_within():.3f}% within 1 level (max diff {diff.largest}), params {p}")
                if op == "v2":
                    floats = torch.from_numpy(np.fromfile(stem + "v2.f32", dtype=np.float32).reshape(theirs.shape))
                    expected = F.normalize(theirs.float() / 255, p["mean"], p["std"])
                    tol = 1.0 / 255 / min(p["std"]) + 1e-4
                    fshare = ((floats - expected).abs() <= tol).double().mean().item()
                    if fshare < MIN_SHARE:
                        failures.append(f"{p['image']} case {p['case']} normalised v2: {100 * fshare:.3f}% within one level")
            check_pil_path(p, image, stem, stats, failures)
            check_pil_normalised(p, image, stem, failures)
        pairs = [json.loads(line) for line in open(os.path.join(out_dir, "v3_pairs.jsonl"))]
        counts = check_v3_pair(pairs, in_dir, out_dir, stats, failures)
        check_all_colours(args.tool, root, args.colour_cases, stats, failures)
        print(f"{count} images, {len(rows)} parameter sets; the PIL path also on every 24-bit colour (pil-all)")
        for view, (n, blurred, solarized) in counts.items():
            print(f"v3 pair, view {view}: {n} views, {blurred} blurred, {solarized} solarized")
        keys = [("tensor", op) for op in OPS] + [(path, op) for path in ("pil", "pil-all") for op in PIL_OPS]
        keys += [("pil", "v3_view1"), ("pil", "v3_view2")]
        stats.print(keys)
        for op, row in PIL_OPS.items():
            if row.max_diff:
                print(f"pil {op}: not bit-exact, bound {row.max_diff}: {row.why}")
        missing = [f"{path} {op}" for path, op in keys if not stats.rows[(path, op)][0]]
        if missing:
            failures.append(f"no output compared for {missing}")
        for f in failures[:20]:
            print("FAIL:", f)
        if failures:
            print(f"{len(failures)} failure(s): tensor outputs beyond one level on over {100 * (1 - MIN_SHARE):.1f}% of pixels, or PIL outputs beyond their bound")
            return 1
        print("tensor path: every output within one uint8 level of torchvision on >= 99.9% of pixels; PIL path: every output within its bound (0 unless stated)")
        return 0


if __name__ == "__main__":
    sys.exit(main())
