// defines: Recipe and AugmentOptions (which augmentation, its strengths), augment_batch (two-view
// training augmentation of a uint8 batch), view_seed, normalize_batch (evaluation)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moco::data {

// kSimple: the greyscale recipe of the small datasets (crop, flip, brightness/contrast), done on a
// whole batch at once in float. kV1 / kV2: MoCo v1 and v2 ("aug+") of the official main_moco.py,
// per sample on uint8 pixels, equal to torchvision (view_augment.h says what each one does).
enum class Recipe { kSimple, kV1, kV2 };
Recipe parse_recipe(const std::string& name);  // simple | v1 | v2; throws std::invalid_argument
const char* recipe_name(Recipe recipe);

struct AugmentOptions {
  Recipe recipe = Recipe::kSimple;
  int64_t out_size = 28;                    // output is out_size x out_size
  double scale_min = 0.2, scale_max = 1.0;  // crop area as a fraction of the image
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double flip_prob = 0.5;                             // horizontal
  double jitter_prob = 0.8;                           // simple, v2: jitter applied with this probability (v1: always)
  double brightness = 0.4, contrast = 0.4;            // factors drawn from [max(0, 1-x), 1+x]
  double saturation = 0.4;                            // v1, v2: as brightness
  double hue = 0.1;                                   // v1, v2: hue shift drawn from [-x, x], x <= 0.5
  double grayscale_prob = 0.2;                        // v1, v2
  double blur_prob = 0.5;                             // v2
  double blur_sigma_min = 0.1, blur_sigma_max = 2.0;  // v2
  std::vector<double> mean{0.5}, std{0.5};            // per channel (one value broadcasts)
  bool dct_scaling = true;                            // encoded JPEGs: decode at a DCT scale where the crop allows
};

// uint8 [n, C, H, W] -> float [n, C, out, out]. Sample i draws its random parameters from
// std::mt19937_64(sample_seeds[i]) alone, so a sample's view does not depend on which batch, rank
// or thread it lands in. Throws std::invalid_argument on bad options or shapes.
torch::Tensor augment_batch(const torch::Tensor& images, const AugmentOptions& options,
                            const std::vector<uint64_t>& sample_seeds);

// The seed of one view of one sample in one epoch (a hash of all four).
uint64_t view_seed(uint64_t seed, int64_t epoch, int64_t index, int view);

// uint8 [n, C, H, W] -> float [n, C, H, W] scaled to [0,1] and normalised, no randomness.
torch::Tensor normalize_batch(const torch::Tensor& images, const AugmentOptions& options);

}  // namespace moco::data
