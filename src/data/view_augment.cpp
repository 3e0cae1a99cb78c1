#include "data/view_augment.h"

#include "data/color_jitter.h"
#include "data/gaussian_blur.h"
#include "data/pil_blur.h"
#include "data/pil_color.h"
#include "data/pil_resize.h"
#include "data/resize.h"

#include <algorithm>
#include <stdexcept>

namespace moco::data {
namespace {

// The steps of one implementation; the pipelines below are written once over them.
struct ViewOps {
  Image (*crop)(const Image&, const CropBox&, int64_t, int64_t);
  void (*grayscale)(Image&);
  void (*jitter)(Image&, const JitterParams&);
  void (*blur)(Image&, double);
  void (*solarize)(Image&);
};

// Solarize is one map of uint8 values in PIL and in torchvision's tensor functions alike.
const ViewOps& view_ops(Transforms transforms) {
  static const ViewOps tensor{resized_crop, to_grayscale, color_jitter, gaussian_blur, pil::solarize};
  static const ViewOps pil{pil_resized_crop, pil::to_grayscale, pil::color_jitter, pil_gaussian_blur, pil::solarize};
  return transforms == Transforms::kPil ? pil : tensor;
}

}  // namespace

Image resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width,
                   Transforms transforms) {
  return view_ops(transforms).crop(image, box, out_height, out_width);
}

void hflip(Image& image) {
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < image.height; ++y) {
      uint8_t* line = image.channel(c) + y * image.width;
      std::reverse(line, line + image.width);
    }
}

Image augment_view(const Image& image, const ViewParams& p, Recipe recipe, Transforms transforms, int64_t out_size) {
  if (recipe == Recipe::kSimple)
    throw std::invalid_argument("augment_view: the simple recipe is batched (augment_batch)");
  const ViewOps& ops = view_ops(transforms);
  Image view = ops.crop(image, p.box, out_size, out_size);
  if (recipe == Recipe::kV1) {
    if (p.grayscale) ops.grayscale(view);
    if (p.jitter) ops.jitter(view, p.jitter_params);
  } else {  // v2, v3
    if (p.jitter) ops.jitter(view, p.jitter_params);
    if (p.grayscale) ops.grayscale(view);
    if (p.blur) ops.blur(view, p.sigma);
    if (p.solarize && recipe == Recipe::kV3) ops.solarize(view);
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

ViewOut view_out(torch::Tensor& views, int64_t i) {
  const int64_t values = views.size(1) * views.size(2) * views.size(3);
  if (views.scalar_type() == torch::kUInt8) return views.data_ptr<uint8_t>() + i * values;
  return views.data_ptr<float>() + i * values;
}

void write_view(const Image& view, const std::vector<double>& mean, const std::vector<double>& std, ViewOut out) {
  if (out.pixels)
    std::copy(view.pixels.begin(), view.pixels.end(), out.pixels);
  else
    normalize_into(view, mean, std, out.normalised);
}

}  // namespace moco::data
