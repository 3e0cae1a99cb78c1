#include "data/view_params.h"

#include "data/hash.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace moco::data {
namespace {

// Python's round(), which torchvision's box arithmetic uses, rounds halves to even; nearbyint does
// too in the default rounding mode, where std::lround would round them away from zero.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

double factor(std::mt19937_64& rng, double strength) {
  return detail::uniform(rng, std::max(0.0, 1 - strength), 1 + strength);
}

}  // namespace

CropBox random_resized_crop(std::mt19937_64& rng, int64_t height, int64_t width, const AugmentOptions& o) {
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * detail::uniform(rng, o.scale_min, o.scale_max);
    const double aspect = std::exp(detail::uniform(rng, log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(height - h + 1)));
      const auto left = static_cast<int64_t>(detail::uniform_below(rng, static_cast<uint64_t>(width - w + 1)));
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = std::max<int64_t>(1, round_half_even(static_cast<double>(w) / o.ratio_min));
  } else if (in_ratio > o.ratio_max) {
    w = std::max<int64_t>(1, round_half_even(static_cast<double>(h) * o.ratio_max));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

JitterParams draw_jitter(std::mt19937_64& rng, const AugmentOptions& o) {
  JitterParams p;
  // torch.randperm(4), as Fisher-Yates: every order equally likely.
  for (size_t i = p.order.size(); i > 1; --i) std::swap(p.order[i - 1], p.order[detail::uniform_below(rng, i)]);
  p.brightness = factor(rng, o.brightness);
  p.contrast = factor(rng, o.contrast);
  p.saturation = factor(rng, o.saturation);
  p.hue = detail::uniform(rng, -o.hue, o.hue);
  return p;
}

ViewParams draw_view_params(uint64_t seed, int64_t height, int64_t width, const AugmentOptions& o) {
  std::mt19937_64 rng(seed);
  ViewParams p;
  p.box = random_resized_crop(rng, height, width, o);
  // Gates are drawn even where the recipe ignores them, so the draws after them stay in place.
  const bool jitter_gate = detail::uniform01(rng) < o.jitter_prob;
  p.jitter = o.recipe == Recipe::kV1 || jitter_gate;
  p.jitter_params = draw_jitter(rng, o);
  p.grayscale = detail::uniform01(rng) < o.grayscale_prob;
  const bool blur_gate = detail::uniform01(rng) < o.blur_prob;
  p.blur = (o.recipe == Recipe::kV2 || o.recipe == Recipe::kV3) && blur_gate;
  p.sigma = detail::uniform(rng, o.blur_sigma[0], o.blur_sigma[1]);
  p.flip = detail::uniform01(rng) < o.flip_prob;
  // v3's gate comes last although its solarize precedes the flip: v1's and v2's draws stay as they were.
  const bool solarize_gate = detail::uniform01(rng) < o.solarize_prob;
  p.solarize = o.recipe == Recipe::kV3 && solarize_gate;
  return p;
}

}  // namespace moco::data
