#include "data/gaussian_blur.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {
namespace {

// torchvision's _get_gaussian_kernel1d in float32: linspace(-(k-1)/2, (k-1)/2, k), exp, normalise.
std::vector<float> kernel_1d(int64_t size, double sigma) {
  std::vector<float> k(static_cast<size_t>(size));
  const float half = static_cast<float>(size - 1) * 0.5f;
  const auto s = static_cast<float>(sigma);
  float total = 0.0f;
  for (int64_t i = 0; i < size; ++i) {
    const float x = -half + static_cast<float>(i);
    const float r = x / s;
    k[static_cast<size_t>(i)] = std::exp(-0.5f * r * r);
    total += k[static_cast<size_t>(i)];
  }
  for (float& v : k) v /= total;
  return k;
}

// torch's "reflect" padding: the edge pixel is not repeated (-1 -> 1, n -> n-2).
int64_t reflect(int64_t i, int64_t n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

}  // namespace

int64_t blur_kernel_size(double sigma, int64_t height, int64_t width) {
  auto size = 2 * static_cast<int64_t>(std::ceil(3.0 * sigma)) + 1;
  // Reflect padding needs pad < side: an image of side s takes at most 2(s-1)+1 taps.
  const int64_t cap = 2 * (std::min(height, width) - 1) + 1;
  return std::max<int64_t>(1, std::min(size, cap));
}

void gaussian_blur(Image& image, double sigma) {
  if (!(sigma > 0) || !std::isfinite(sigma))
    throw std::invalid_argument("gaussian_blur: sigma must be positive, got " + std::to_string(sigma));
  const int64_t h = image.height, w = image.width;
  if (h == 0 || w == 0) return;
  const int64_t size = blur_kernel_size(sigma, h, w), pad = size / 2;
  const std::vector<float> k = kernel_1d(size, sigma);
  std::vector<float> across(static_cast<size_t>(h * w));
  // One row at a time, reflect-padded into `padded` first, so the tap loop has no bounds logic and
  // the compiler can vectorise it (at sigma 2 the blur otherwise costs more than the rest of a view).
  std::vector<float> padded(static_cast<size_t>(w + 2 * pad));
  for (int64_t c = 0; c < image.channels; ++c) {
    uint8_t* plane = image.channel(c);
    for (int64_t y = 0; y < h; ++y) {
      const uint8_t* line = plane + y * w;
      for (int64_t x = -pad; x < w + pad; ++x)
        padded[static_cast<size_t>(x + pad)] = static_cast<float>(line[reflect(x, w)]);
      float* dst = across.data() + y * w;
      std::fill(dst, dst + w, 0.0f);
      for (int64_t j = 0; j < size; ++j) {
        const float kj = k[static_cast<size_t>(j)];
        const float* src = padded.data() + j;
        for (int64_t x = 0; x < w; ++x) dst[x] += kj * src[x];
      }
    }
    std::vector<float> acc(static_cast<size_t>(w));
    for (int64_t y = 0; y < h; ++y) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < size; ++j) {
        const float kj = k[static_cast<size_t>(j)];
        const float* line = across.data() + reflect(y + j - pad, h) * w;
        for (int64_t x = 0; x < w; ++x) acc[static_cast<size_t>(x)] += kj * line[x];
      }
      for (int64_t x = 0; x < w; ++x)
        plane[y * w + x] = static_cast<uint8_t>(std::clamp(std::nearbyint(acc[static_cast<size_t>(x)]), 0.0f, 255.0f));
    }
  }
}

}  // namespace moco::data
