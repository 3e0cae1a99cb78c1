#include "data/pil_blur.h"

#include "data/plane_transpose.h"
#include "data/simd_clones.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {
namespace {

// One extended box in Pillow's 24-bit fixed point: `radius` whole pixels each side at weight
// `inner`, and the two next ones at `edge`, the fraction (1 - (2 radius + 1) inner) / 2 each.
struct PilBox {
  int64_t radius = 0;
  uint32_t inner = 0, edge = 0;
};

// Pillow's ImagingHorizontalBoxBlur set-up, with its float division truncated to an integer and its
// unsigned arithmetic.
PilBox pil_box(float radius) {
  PilBox b;
  b.radius = static_cast<int64_t>(radius);
  b.inner = static_cast<uint32_t>(static_cast<float>(1u << 24) / (radius * 2 + 1));
  b.edge = ((1u << 24) - static_cast<uint32_t>(b.radius * 2 + 1) * b.inner) / 2;
  return b;
}

// One pass of the box along the row index: `src` and `dst` are n rows of m pixels and each of the
// m columns is blurred on its own. Pillow blurs a line at a time (rows, then the rows of the
// transposed image); running the m lines side by side gives the same integers and vectorises.
// A source index outside [0, n) reads the nearest edge pixel, which is what Pillow's three loops
// per line amount to. `acc` holds the running sums of the window [y - r, y + r], modulo 2^32 as
// Pillow's UINT32 (so the subtraction may wrap: the sum stays exact).
MOCO_AVX2_CLONE void pil_box_pass(const uint8_t* src, uint8_t* dst, int64_t n, int64_t m, const PilBox& b,
                                  std::vector<uint32_t>& acc) {
  const int64_t r = b.radius, last = n - 1;
  auto row = [&](int64_t y) { return src + std::clamp<int64_t>(y, 0, last) * m; };
  // The window of the pixel before the first: r + 1 copies of the first pixel, then [0, r).
  const int64_t whole = std::min(r, last);
  acc.assign(static_cast<size_t>(m), 0);
  for (int64_t x = 0; x < m; ++x) {
    acc[static_cast<size_t>(x)] = static_cast<uint32_t>(src[x]) * static_cast<uint32_t>(r + 1) +
                                  static_cast<uint32_t>(src[last * m + x]) * static_cast<uint32_t>(r - whole);
  }
  for (int64_t y = 0; y < whole; ++y)
    for (int64_t x = 0; x < m; ++x) acc[static_cast<size_t>(x)] += src[y * m + x];
  const uint32_t inner = b.inner, edge = b.edge;
  for (int64_t y = 0; y < n; ++y) {
    // __restrict__: the output row aliases none of the inputs, so the loop vectorises.
    const uint8_t* __restrict__ gone = row(y - r - 1);
    const uint8_t* __restrict__ come = row(y + r);
    const uint8_t* __restrict__ far = row(y + r + 1);
    uint8_t* __restrict__ out = dst + y * m;
    uint32_t* __restrict__ sums = acc.data();
    for (int64_t x = 0; x < m; ++x) {
      const uint32_t a = sums[x] + come[x] - gone[x];
      sums[x] = a;
      out[x] = static_cast<uint8_t>((a * inner + (static_cast<uint32_t>(gone[x]) + far[x]) * edge + (1u << 23)) >> 24);
    }
  }
}

}  // namespace

float pil_box_radius(float radius, int passes) {
  // Pillow mixes float variables with double literals: each line is computed in double where a
  // double appears and stored in float, and the last two lines stay in float.
  const float sigma2 = radius * radius / static_cast<float>(passes);
  const auto length = static_cast<float>(std::sqrt(12.0 * sigma2 + 1.0));
  const auto whole = static_cast<float>(std::floor((length - 1.0) / 2.0));
  float fraction = (2 * whole + 1) * (whole * (whole + 1) - 3 * sigma2);
  fraction /= 6 * (sigma2 - (whole + 1) * (whole + 1));
  return whole + fraction;
}

void pil_gaussian_blur(Image& image, double radius) {
  if (!(radius >= 0) || !std::isfinite(radius))
    throw std::invalid_argument("pil_gaussian_blur: radius must be finite and >= 0, got " + std::to_string(radius));
  const int64_t h = image.height, w = image.width;
  if (h == 0 || w == 0 || radius == 0) return;
  constexpr int kPasses = 3;  // ImageFilter.GaussianBlur's default
  // Python hands Pillow the radius as a C float.
  const PilBox b = pil_box(pil_box_radius(static_cast<float>(radius), kPasses));
  std::vector<uint8_t> one(static_cast<size_t>(h * w)), two(one.size());
  std::vector<uint32_t> acc;
  for (int64_t c = 0; c < image.channels; ++c) {
    uint8_t* plane = image.channel(c);
    // Across first (as rows of the transposed plane), then down: each pass rounds, so the order
    // is Pillow's.
    transpose_plane(plane, h, w, w, one.data());
    pil_box_pass(one.data(), two.data(), w, h, b, acc);
    pil_box_pass(two.data(), one.data(), w, h, b, acc);
    pil_box_pass(one.data(), two.data(), w, h, b, acc);
    transpose_plane(two.data(), w, h, h, plane);
    pil_box_pass(plane, one.data(), h, w, b, acc);
    pil_box_pass(one.data(), two.data(), h, w, b, acc);
    pil_box_pass(two.data(), plane, h, w, b, acc);
  }
}

}  // namespace moco::data
