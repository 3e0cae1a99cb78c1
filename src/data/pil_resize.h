// defines: pil_resized_crop (a box of an image resampled with Pillow's bilinear filter, bit for bit
// as Pillow 9.4's img.crop(box).resize(size, Image.BILINEAR), what torchvision does to a PIL image)
#pragma once

#include <cstdint>

#include "data/image.h"

namespace moco::data {

// Crops `box` out of `image` and resizes it to out_height x out_width exactly as Pillow 9.4 does
// (Resample.c): double-precision triangle weights whose support widens with the shrink factor,
// turned into 22-bit fixed point; a horizontal pass rounded to uint8 over only the rows the
// vertical pass reads, then the vertical pass; a pass is skipped where its size is unchanged. So
// torchvision's resized_crop and Resize on a PIL image (the official main_moco.py's views) come out
// equal. The box of the whole image is a plain resize (the evaluation view's Resize(256)). Works
// per channel on planar images of any channel count. Throws std::invalid_argument if the box is
// empty or leaves the image, or a size is not positive.
Image pil_resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width);

}  // namespace moco::data
