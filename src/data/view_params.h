// defines: ViewParams (every random choice of one augmented view, explicit so that tests can fix
// them) and the draws: random_resized_crop, draw_jitter, draw_view_params
#pragma once

#include "data/augment.h"
#include "data/color_jitter.h"
#include "data/image.h"

#include <random>

namespace moco::data {

struct ViewParams {
  CropBox box;
  bool jitter = false;  // colour jitter applied (v1: always)
  JitterParams jitter_params;
  bool grayscale = false;
  bool blur = false;  // v2, v3
  double sigma = 0.0;
  bool flip = false;
  bool solarize = false;  // v3 only
};

// torchvision's RandomResizedCrop.get_params: ten tries at a box of uniform area fraction in
// [scale_min, scale_max] and log-uniform aspect ratio, then the central crop clamped to the ratio range.
CropBox random_resized_crop(std::mt19937_64& rng, int64_t height, int64_t width, const AugmentOptions& options);

// ColorJitter.get_params: a uniformly random order of the four operations, then the factors
// (brightness, contrast, saturation from [max(0, 1-x), 1+x], hue from [-x, x]). All four are
// always drawn, so later draws do not depend on the strengths.
JitterParams draw_jitter(std::mt19937_64& rng, const AugmentOptions& options);

// The v1/v2/v3 parameters of a view of a height x width image, from std::mt19937_64(seed) alone, in a
// fixed order (crop, jitter gate, jitter, grayscale gate, blur gate, sigma, flip gate, solarize gate)
// whatever the recipe, so a view is a function of (seed, image size, options). v3's views differ in
// their blur and solarize probabilities: draw each with options_of_view(options, view).
ViewParams draw_view_params(uint64_t seed, int64_t height, int64_t width, const AugmentOptions& options);

}  // namespace moco::data
