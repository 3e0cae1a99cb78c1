// defines: the colour operations of MoCo's augmentations as torchvision.transforms.functional does
// them on a PIL image (functional_pil.py, i.e. Pillow 9.4's C code): adjust_brightness/contrast/
// saturation/hue, the greyscale of RandomGrayscale, a ColorJitter draw (JitterParams) and
// ImageOps.solarize, each bit for bit, on a uint8 Image (1 channel = PIL mode "L", 3 = "RGB")
#pragma once

#include "data/color_jitter.h"
#include "data/image.h"

namespace moco::data::pil {

// PIL's integer luma of convert("L"): (19595 R + 38470 G + 7471 B + 0x8000) >> 16, rounded
// (torchvision's tensor luma truncates instead).
uint8_t luma(uint8_t r, uint8_t g, uint8_t b);

// Image.blend(degenerate, image, alpha) for one pixel (Pillow's Blend.c): alpha as a float; in [0, 1]
// degenerate + alpha * (image - degenerate) in float truncated, outside it the same clipped to 0..255.
uint8_t blend(uint8_t degenerate, uint8_t value, float alpha);

// In place, ImageEnhance's Brightness (blend with black), Contrast (with the grey of
// int(mean luma + 0.5)) and Color (with the image's own greyscale); throw std::invalid_argument for
// a negative or non-finite factor. Color leaves a one-channel image unchanged, as PIL does.
void adjust_brightness(Image& image, double factor);
void adjust_contrast(Image& image, double factor);
void adjust_saturation(Image& image, double factor);
// In place: convert("HSV") (Convert.c, uint8 H, S, V), H += np.uint8(hue_factor * 255) with uint8
// wrap-around, convert("RGB"). hue_factor in [-0.5, 0.5]; one-channel images are left unchanged. A
// zero factor still makes the (lossy) round trip through HSV, as PIL does.
void adjust_hue(Image& image, double hue_factor);
// RandomGrayscale's output: every channel set to luma(); a one-channel image is unchanged.
void to_grayscale(Image& image);
// ColorJitter with these factors in this order; identity factors skipped as in color_jitter().
void color_jitter(Image& image, const JitterParams& params);
// In place, ImageOps.solarize(image) at its default threshold, as moco-v3's moco.loader.Solarize
// calls it: a value v of any channel stays below 128 and becomes 255 - v from 128 up. torchvision's
// solarize of a uint8 tensor at 128 maps the same (v >= 128 inverted), so both paths use this one.
void solarize(Image& image);

// np.uint8(hue_factor * 255) as numpy 1.24 computes it on x86-64: the product truncated toward
// zero, then wrapped modulo 256 (so -0.1 gives 231, not 0).
uint8_t hue_shift(double hue_factor);

}  // namespace moco::data::pil
