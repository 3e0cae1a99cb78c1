// defines: the colour operations of MoCo's augmentations on a uint8 Image, each equal to
// torchvision.transforms.functional on a uint8 tensor (adjust_brightness/contrast/saturation/hue,
// rgb_to_grayscale), and ColorJitter with explicit factors and order (JitterParams)
#pragma once

#include "data/image.h"

#include <array>

namespace moco::data {

// Every operation works in place and quantises to uint8 at its end as torchvision does on uint8
// tensors: blends are computed in float32 and truncated (not rounded), so a chain of them matches
// torchvision step by step rather than drifting by one level per step. One-channel images:
// saturation and hue leave them unchanged, contrast anchors on their own mean (torchvision's rules).
void adjust_brightness(Image& image, double factor);
void adjust_contrast(Image& image, double factor);
void adjust_saturation(Image& image, double factor);
void adjust_hue(Image& image, double hue_factor);  // hue_factor in [-0.5, 0.5]
// RandomGrayscale's output: every channel set to the luma (0.2989 R + 0.587 G + 0.114 B, truncated).
void to_grayscale(Image& image);

// One ColorJitter draw: the four factors and the order they are applied in (0 brightness,
// 1 contrast, 2 saturation, 3 hue). A factor left at identity (1, or hue 0) is skipped, as
// torchvision skips a jitter configured with strength 0.
struct JitterParams {
  std::array<int, 4> order{0, 1, 2, 3};
  double brightness = 1.0, contrast = 1.0, saturation = 1.0, hue = 0.0;
};
void color_jitter(Image& image, const JitterParams& params);

// One implementation's four operations (this file's, or pil_color.h's), numbered as
// JitterParams::order; apply_jitter is the one dispatcher both color_jitter()s use.
struct JitterOps {
  void (*brightness)(Image&, double);
  void (*contrast)(Image&, double);
  void (*saturation)(Image&, double);
  void (*hue)(Image&, double);
};
void apply_jitter(Image& image, const JitterParams& params, const JitterOps& ops);

}  // namespace moco::data
