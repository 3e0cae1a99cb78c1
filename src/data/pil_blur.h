// defines: pil_gaussian_blur (Pillow 9.4's ImageFilter.GaussianBlur(radius), bit for bit: MoCo v2's
// moco.loader.GaussianBlur)
#pragma once

#include "data/image.h"

namespace moco::data {

// In place, equal to img.filter(ImageFilter.GaussianBlur(radius)) of Pillow 9.4 (BoxBlur.c): three
// passes of an extended box blur across, then three down, each in 24-bit fixed point rounded to
// uint8, edges replicated. The box's radius is fractional, chosen (in float, as Pillow) so that
// three passes have the variance radius^2 (Gwosdek et al. 2011); the two pixels at its ends get the
// fractional weight. Each pass is a running sum: O(1) per pixel whatever the radius. Throws
// std::invalid_argument unless the radius is finite and >= 0 (0 leaves the image as it is).
void pil_gaussian_blur(Image& image, double radius);

// The extended box's radius for a Gaussian of `radius` over `passes` box passes, in float as
// Pillow's _gaussian_blur_radius computes it (exposed for the tests).
float pil_box_radius(float radius, int passes);

}  // namespace moco::data
