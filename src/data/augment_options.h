// defines: Recipe (which augmentation) and AugmentOptions (its strengths and the views' size and
// normalisation): the one home of every augmentation setting. Each data.* key binds one of these
// members through its row in data/augment_params.cpp, so a new setting is a member here, a row there
// and its op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moco::data {

// kSimple: the greyscale recipe of the small datasets (crop, flip, brightness/contrast), done on a
// whole batch at once in float. kV1 / kV2: MoCo v1 and v2 ("aug+") of the official main_moco.py,
// per sample on uint8 pixels, equal to torchvision (view_augment.h says what each one does). kV3:
// MoCo v3's asymmetric pair (facebookresearch/moco-v3 main_moco.py augmentation1/2): v2's steps and
// a solarize, the two views with blur and solarize probabilities of their own (options_of_view).
enum class Recipe { kSimple, kV1, kV2, kV3 };
Recipe parse_recipe(const std::string& name);  // simple | v1 | v2 | v3; throws std::invalid_argument
const char* recipe_name(Recipe recipe);

// Whose pixels the v1/v2 views (and the evaluation view of encoded images) equal. kPil: torchvision's
// transforms on a PIL image, as the official main_moco.py / main_lincls.py apply them (Pillow's
// bilinear resize, ImageEnhance, hue on uint8 HSV, "L" greyscale, ImageFilter.GaussianBlur).
// kTensor: torchvision.transforms.functional on a uint8 tensor (sampled Gaussian blur, float hue).
enum class Transforms { kPil, kTensor };

struct AugmentOptions {
  Recipe recipe = Recipe::kSimple;
  int64_t out_size = 28;                    // output is out_size x out_size
  double scale_min = 0.2, scale_max = 1.0;  // crop area as a fraction of the image
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double flip_prob = 0.5;                    // horizontal
  double jitter_prob = 0.8;                  // simple, v2, v3: jitter applied with this probability (v1: always)
  double brightness = 0.4, contrast = 0.4;   // factors drawn from [max(0, 1-x), 1+x]
  double saturation = 0.4;                   // v1-v3: as brightness
  double hue = 0.1;                          // v1-v3: hue shift drawn from [-x, x], x <= 0.5
  double grayscale_prob = 0.2;               // v1-v3
  double blur_prob = 0.5;                    // v2: both views; v3: the first (query) view
  double key_blur_prob = 0.1;                // v3: the second (key) view
  double solarize_prob = 0.0;                // v3: the first view
  double key_solarize_prob = 0.2;            // v3: the second view
  std::vector<double> blur_sigma{0.1, 2.0};  // v2, v3: [min, max]
  std::vector<double> mean{0.5}, std{0.5};   // per channel (one value broadcasts)
  bool dct_scaling = true;                   // encoded JPEGs: decode at a DCT scale where the crop allows
  Transforms transforms = Transforms::kPil;  // v1-v3 and encoded evaluation views
};

}  // namespace moco::data
