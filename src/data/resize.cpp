#include "data/resize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace moco::data {
namespace {

// The taps of one output index along one axis: `count` source indices from `first`, their weights.
struct Taps {
  int64_t first = 0, count = 0;
  std::vector<float> weights;
};

float triangle(float x) {
  x = std::fabs(x);
  return x < 1.0f ? 1.0f - x : 0.0f;
}

// torch's _compute_indices_min_size_weights_aa (UpSampleKernel.cpp), which follows PIL's
// ImagingResample: the filter's support grows with the shrink factor, taps outside the input are
// dropped and the rest renormalised (which is also what clamps plain bilinear at the border).
std::vector<Taps> taps_for(int64_t in_size, int64_t out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0f ? scale : 1.0f;  // interp_size 2 (bilinear) times 0.5
  const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  std::vector<Taps> all(static_cast<size_t>(out_size));
  for (int64_t i = 0; i < out_size; ++i) {
    const float center = scale * (static_cast<float>(i) + 0.5f);
    Taps& t = all[static_cast<size_t>(i)];
    t.first = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5f), 0);
    t.count = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5f), in_size) - t.first;
    t.weights.resize(static_cast<size_t>(std::max<int64_t>(t.count, 0)));
    float total = 0.0f;
    for (int64_t j = 0; j < t.count; ++j) {
      const float w = triangle((static_cast<float>(j + t.first) - center + 0.5f) * invscale);
      t.weights[static_cast<size_t>(j)] = w;
      total += w;
    }
    if (total != 0.0f)
      for (float& w : t.weights) w /= total;
  }
  return all;
}

}  // namespace

Image resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width) {
  if (box.height <= 0 || box.width <= 0 || box.top < 0 || box.left < 0 || box.top + box.height > image.height ||
      box.left + box.width > image.width || out_height <= 0 || out_width <= 0) {
    throw std::invalid_argument("resized_crop: box " + std::to_string(box.width) + "x" + std::to_string(box.height) +
                                "+" + std::to_string(box.left) + "+" + std::to_string(box.top) + " of a " +
                                std::to_string(image.width) + "x" + std::to_string(image.height) + " image to " +
                                std::to_string(out_width) + "x" + std::to_string(out_height));
  }
  const std::vector<Taps> across = taps_for(box.width, out_width);
  const std::vector<Taps> down = taps_for(box.height, out_height);
  Image out(image.channels, out_height, out_width);
  std::vector<float> rows(static_cast<size_t>(box.height * out_width));  // the horizontal pass of one channel
  for (int64_t c = 0; c < image.channels; ++c) {
    const uint8_t* src = image.channel(c) + box.top * image.width + box.left;
    for (int64_t y = 0; y < box.height; ++y) {
      const uint8_t* line = src + y * image.width;
      float* dst = rows.data() + y * out_width;
      for (int64_t x = 0; x < out_width; ++x) {
        const Taps& t = across[static_cast<size_t>(x)];
        float sum = 0.0f;
        for (int64_t j = 0; j < t.count; ++j)
          sum += t.weights[static_cast<size_t>(j)] * static_cast<float>(line[t.first + j]);
        dst[x] = sum;
      }
    }
    uint8_t* dst = out.channel(c);
    std::vector<float> acc(static_cast<size_t>(out_width));
    for (int64_t y = 0; y < out_height; ++y) {
      // Row by row, so the inner loop runs along memory; each output still sums its taps in order.
      const Taps& t = down[static_cast<size_t>(y)];
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < t.count; ++j) {
        const float w = t.weights[static_cast<size_t>(j)];
        const float* line = rows.data() + (t.first + j) * out_width;
        for (int64_t x = 0; x < out_width; ++x) acc[static_cast<size_t>(x)] += w * line[x];
      }
      // Non-negative weights summing to 1 keep the value in [0, 255]; the clamp guards rounding.
      for (int64_t x = 0; x < out_width; ++x)
        dst[y * out_width + x] =
            static_cast<uint8_t>(std::clamp(std::nearbyint(acc[static_cast<size_t>(x)]), 0.0f, 255.0f));
    }
  }
  return out;
}

}  // namespace moco::data
