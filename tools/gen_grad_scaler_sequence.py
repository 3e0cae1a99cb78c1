#!/usr/bin/python3
"""Writes tests/fixtures/grad_scaler_sequence.tsv: what torch.cuda.amp.GradScaler does over scripted steps
whose gradients are finite, Inf or NaN (GradScalerTest replays the script through model::GradScaler).

    /usr/bin/python3 tools/gen_grad_scaler_sequence.py tests/fixtures          writes the file
    PYTHON tools/gen_grad_scaler_sequence.py --torch tests/fixtures            checks it against torch's own

torch 1.13's GradScaler runs only on CUDA (its _amp_update_scale_ and
_amp_foreach_non_finite_check_and_unscale_ have no CPU kernel; on a CPU it disables itself), so the
file is written from GradScaler's documented algorithm, torch/cuda/amp/grad_scaler.py (1.13):
- lines 85-108 and 111-135: init_scale 2**16, growth_factor 2.0, backoff_factor 0.5, growth_interval
  2000; infs/NaNs in the gradients skip optimizer.step() and multiply the scale by backoff_factor;
  growth_interval unskipped iterations in a row multiply it by growth_factor;
- lines 144-147: the scale is a float32 tensor of shape (1,), the growth tracker an int32 one;
- lines 285-289 (_maybe_opt_step): the step is skipped when the found_inf of unscale_ is nonzero;
- lines 396-401 (update): torch._amp_update_scale_, whose kernel (aten/src/ATen/native/cuda/
  AmpKernels.cu, amp_update_scale_cuda_kernel) does: on found_inf, scale = float(scale * backoff) and
  tracker = 0; else successful = tracker + 1 and, if successful == growth_interval, scale =
  float(scale * growth) unless that is not finite (then the scale stays) and tracker = 0, else
  tracker = successful (the products in double: the factors are doubles).
--torch replays the same script through torch.amp.GradScaler("cpu") (torch >= 2.3 has the CPU
kernels of the same update) and exits 1 where a skip, scale or tracker differs from the file.

Format: `scenario NAME INIT GROWTH BACKOFF INTERVAL` starts a scaler with those options; each
`run STEPS GRADS SKIPPED SCALE TRACKER` line is STEPS steps in a row whose gradients are GRADS
(finite, inf or nan), each skipped (1) or not (0), then the scale and tracker after the last of them.
"""
import os
import sys

import numpy as np

SCENARIOS = [
    # The defaults: growth after 2000 good steps (not 1999), the tracker reset by an Inf and by a NaN,
    # growth again counted from the reset.
    (("defaults", 2.0**16, 2.0, 0.5, 2000),
     [(1999, "finite"), (1, "finite"), (1, "inf"), (1999, "finite"), (1, "nan"), (2000, "finite"),
      (2001, "finite"), (1, "inf")]),
    # A short interval, step by step: growth, back-offs in a row, a reset one step before growth.
    (("interval3", 2.0**16, 2.0, 0.5, 3),
     [(1, k) for k in ["finite", "finite", "finite", "inf", "inf", "finite", "finite", "nan", "finite",
                       "finite", "finite", "finite", "inf", "finite", "finite", "finite", "finite"]]),
    # Factors that are not powers of two: the products are rounded to float32 each time.
    (("odd_factors", 1000.0, 1.5, 0.3, 2),
     [(1, k) for k in ["finite", "finite", "inf", "finite", "finite", "finite", "finite", "inf",
                       "inf", "finite", "finite"]]),
    # Growth that would overflow float32 keeps the scale (and resets the tracker).
    (("overflow", 2.0**127, 2.0, 0.5, 1), [(1, "finite"), (1, "finite"), (1, "inf"), (1, "finite"), (1, "finite")]),
]


def documented(options, script):
    """The rows of one scenario from the algorithm above."""
    _, init, growth, backoff, interval = options
    scale, tracker, rows = np.float32(init), 0, []
    for steps, grads in script:
        skipped = grads != "finite"
        for _ in range(steps):
            if skipped:
                scale, tracker = np.float32(float(scale) * backoff), 0
            elif tracker + 1 == interval:
                with np.errstate(over="ignore"):  # a product past float32's range becomes inf, as in C
                    grown = np.float32(float(scale) * growth)
                scale, tracker = (grown if np.isfinite(grown) else scale), 0
            else:
                tracker += 1
        rows.append((steps, grads, int(skipped), float(scale), tracker))
    return rows


def with_torch(options, script):
    """The same rows from torch's own GradScaler on a CPU, gradients forced to Inf or NaN."""
    import torch
    _, init, growth, backoff, interval = options
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([param], lr=0.0)
    stepped = []
    original = optimizer.step
    optimizer.step = lambda *a, **k: (stepped.append(True), original(*a, **k))[1]
    scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_factor=growth, backoff_factor=backoff,
                                  growth_interval=interval)
    rows = []
    for steps, grads in script:
        skips = set()
        for _ in range(steps):
            scaler.scale(torch.ones(()))  # the lazy initialisation of the scale and tracker
            value = {"finite": 1.0, "inf": float("inf"), "nan": float("nan")}[grads]
            param.grad = torch.tensor([1.0, value, 2.0])
            before = len(stepped)
            scaler.step(optimizer)
            scaler.update()
            skips.add(int(len(stepped) == before))
        assert len(skips) == 1, f"{options[0]}: a run of {grads} steps skipped some and not others"
        rows.append((steps, grads, skips.pop(), float(scaler.get_scale()), int(scaler._get_growth_tracker())))
    return rows


def format_rows(options, rows):
    name, init, growth, backoff, interval = options
    lines = [f"scenario\t{name}\t{init!r}\t{growth!r}\t{backoff!r}\t{interval}"]
    lines += [f"run\t{s}\t{g}\t{k}\t{scale!r}\t{t}" for s, g, k, scale, t in rows]
    return lines


def main(args):
    check_torch = "--torch" in args
    out_dir = ([a for a in args if a != "--torch"] or ["tests/fixtures"])[0]
    path = os.path.join(out_dir, "grad_scaler_sequence.tsv")
    lines = []
    for options, script in SCENARIOS:
        lines += format_rows(options, documented(options, script))
    if not check_torch:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return 0
    expected = open(path).read().splitlines()
    got = [line for options, script in SCENARIOS for line in format_rows(options, with_torch(options, script))]
    if got != expected:
        for want, have in zip(expected, got):
            if want != have:
                print(f"file: {want}\ntorch: {have}")
        return 1
    print(f"{path}: {len(got)} lines, equal to torch {__import__('torch').__version__}'s GradScaler on a CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
