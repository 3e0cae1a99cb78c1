// defines: resized_crop (a box of an image resampled to a new size with antialiased bilinear
// interpolation, as torchvision's resized_crop(..., antialias=True) on a uint8 tensor)
#pragma once

#include "data/image.h"

namespace moco::data {

// Crops `box` out of `image` and resizes it to out_height x out_width. Shrinking widens the
// bilinear (triangle) filter by the scale factor, as PIL and torch's antialias=True do, so a
// 224 px crop of a 500 px photo averages every source pixel instead of aliasing; enlarging is
// plain bilinear with half-pixel centres (align_corners=False). Horizontal pass first, then
// vertical, in float32, rounded half to even at the end: torch's order and precision.
// Throws std::invalid_argument if the box is empty or leaves the image.
Image resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width);

}  // namespace moco::data
