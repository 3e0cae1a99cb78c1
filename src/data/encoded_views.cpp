#include "data/encoded_views.h"

#include "data/image_decode.h"
#include "data/view_augment.h"
#include "data/view_params.h"

#include <algorithm>
#include <cmath>

namespace moco::data {
namespace {

// The smallest scale at which `box` still spans out_size pixels on both sides.
double scale_needed(const CropBox& box, int64_t out_size) {
  return std::max(static_cast<double>(out_size) / static_cast<double>(box.height),
                  static_cast<double>(out_size) / static_cast<double>(box.width));
}

// A box of the full image mapped onto the decoded (possibly DCT-downscaled) image.
CropBox map_box(const CropBox& b, const ImageSize& full, const Image& decoded) {
  if (decoded.height == full.height && decoded.width == full.width) return b;
  const double sy = static_cast<double>(decoded.height) / static_cast<double>(full.height);
  const double sx = static_cast<double>(decoded.width) / static_cast<double>(full.width);
  CropBox m;
  m.top = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(b.top) * sy)), decoded.height - 1);
  m.left = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(b.left) * sx)), decoded.width - 1);
  m.height = std::clamp<int64_t>(std::llround(static_cast<double>(b.height) * sy), 1, decoded.height - m.top);
  m.width = std::clamp<int64_t>(std::llround(static_cast<double>(b.width) * sx), 1, decoded.width - m.left);
  return m;
}

}  // namespace

void encoded_train_views(const uint8_t* bytes, size_t size, const AugmentOptions& o, bool dct_scaling,
                         uint64_t query_seed, ViewOut query, const uint64_t* key_seed, ViewOut key) {
  const ImageSize full = image_size(bytes, size);
  ViewParams q = draw_view_params(query_seed, full.height, full.width, options_of_view(o, 0)), k;
  double scale = scale_needed(q.box, o.out_size);
  if (key_seed) {
    k = draw_view_params(*key_seed, full.height, full.width, options_of_view(o, 1));
    scale = std::max(scale, scale_needed(k.box, o.out_size));
  }
  // One decode serves both views, at the larger of the two scales they need.
  const int64_t min_h =
      dct_scaling ? static_cast<int64_t>(std::ceil(static_cast<double>(full.height) * std::min(1.0, scale))) : 0;
  const int64_t min_w =
      dct_scaling ? static_cast<int64_t>(std::ceil(static_cast<double>(full.width) * std::min(1.0, scale))) : 0;
  const Decoded decoded = decode_image(bytes, size, min_h, min_w);
  q.box = map_box(q.box, full, decoded.image);
  write_view(augment_view(decoded.image, q, o.recipe, o.transforms, o.out_size), o.mean, o.std, query);
  if (key_seed) {
    k.box = map_box(k.box, full, decoded.image);
    write_view(augment_view(decoded.image, k, o.recipe, o.transforms, o.out_size), o.mean, o.std, key);
  }
}

namespace {

int64_t eval_resize_side(int64_t out_size) {
  return static_cast<int64_t>(std::lround(static_cast<double>(out_size) * 256.0 / 224.0));
}

// torchvision's Resize(int): the shorter side becomes `side`, the longer int(side * long / short).
ImageSize resized_size(int64_t side, int64_t h, int64_t w) {
  return h <= w ? ImageSize{side, static_cast<int64_t>(static_cast<double>(side) * static_cast<double>(w) /
                                                       static_cast<double>(h))}
                : ImageSize{
                      static_cast<int64_t>(static_cast<double>(side) * static_cast<double>(h) / static_cast<double>(w)),
                      side};
}

}  // namespace

Image eval_view(const Image& image, int64_t out_size, Transforms transforms) {
  const ImageSize r = resized_size(eval_resize_side(out_size), image.height, image.width);
  const Image resized = resized_crop(image, {0, 0, image.height, image.width}, r.height, r.width, transforms);
  // CenterCrop: offsets int(round((size - S) / 2)), halves to even as Python's round.
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(r.height - out_size) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(r.width - out_size) / 2.0));
  Image out(image.channels, out_size, out_size);
  for (int64_t c = 0; c < image.channels; ++c)
    for (int64_t y = 0; y < out_size; ++y) {
      const uint8_t* src = resized.channel(c) + (top + y) * resized.width + left;
      std::copy(src, src + out_size, out.channel(c) + y * out_size);
    }
  return out;
}

Image encoded_eval_view(const uint8_t* bytes, size_t size, int64_t out_size, bool dct_scaling, Transforms transforms) {
  const ImageSize full = image_size(bytes, size);
  const ImageSize wanted = resized_size(eval_resize_side(out_size), full.height, full.width);
  return eval_view(decode_image(bytes, size, dct_scaling ? wanted.height : 0, dct_scaling ? wanted.width : 0).image,
                   out_size, transforms);
}

}  // namespace moco::data
