#include "data/view_augment.h"

#include "data/color_jitter.h"
#include "data/gaussian_blur.h"
#include "data/resize.h"

#include <algorithm>
#include <stdexcept>

namespace moco::data {

void hflip(Image& image) {
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < image.height; ++y) {
      uint8_t* line = image.channel(c) + y * image.width;
      std::reverse(line, line + image.width);
    }
}

Image augment_view(const Image& image, const ViewParams& p, Recipe recipe, int64_t out_size) {
  if (recipe == Recipe::kSimple)
    throw std::invalid_argument("augment_view: the simple recipe is batched (augment_batch)");
  Image view = resized_crop(image, p.box, out_size, out_size);
  if (recipe == Recipe::kV1) {
    if (p.grayscale) to_grayscale(view);
    if (p.jitter) color_jitter(view, p.jitter_params);
  } else {
    if (p.jitter) color_jitter(view, p.jitter_params);
    if (p.grayscale) to_grayscale(view);
    if (p.blur) gaussian_blur(view, p.sigma);
  }
  if (p.flip) hflip(view);
  return view;
}

void normalize_into(const Image& image, const std::vector<double>& mean, const std::vector<double>& std, float* out) {
  for (int64_t c = 0; c < image.channels; ++c) {
    const size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(c);
    const auto m = static_cast<float>(mean[k]), s = static_cast<float>(std[k]);
    const uint8_t* src = image.channel(c);
    float* dst = out + c * image.plane();
    for (int64_t i = 0; i < image.plane(); ++i) dst[i] = (static_cast<float>(src[i]) / 255.0f - m) / s;
  }
}

}  // namespace moco::data
