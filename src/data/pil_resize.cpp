#include "data/pil_resize.h"

#include "data/plane_transpose.h"
#include "data/simd_clones.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {
namespace {

// Pillow keeps 8 bits for the value and 2 for overshoot in an int32: weights carry 22 bits.
constexpr int kPilPrecisionBits = 22;
constexpr int32_t kPilHalf = 1 << (kPilPrecisionBits - 1);

// The taps of every output index along one axis: output i reads `count[i]` source indices from
// `first[i]` with the fixed-point weights weights[i * width + j].
struct PilTaps {
  int64_t width = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;
};

double pil_triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs for the bilinear filter (support 1) over the whole axis, then
// normalize_coeffs_8bpc. Every step in double as Pillow does; the order of the operations is
// Pillow's too, since a different rounding of the centre moves a weight by one fixed-point unit.
PilTaps pil_taps(int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const double inverse = 1.0 / filterscale;
  PilTaps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.weights.assign(static_cast<size_t>(out_size * t.width), 0);
  std::vector<double> w(static_cast<size_t>(t.width));
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    // C's (int) truncates toward zero; a negative start is clamped to 0 either way.
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    const int64_t n = hi - lo;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      w[static_cast<size_t>(j)] = pil_triangle((static_cast<double>(j + lo) - center + 0.5) * inverse);
      total += w[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double k = total != 0.0 ? w[static_cast<size_t>(j)] / total : w[static_cast<size_t>(j)];
      // Bilinear weights are never negative, so Pillow's round-half-up branch is the one taken.
      t.weights[static_cast<size_t>(i * t.width + j)] = static_cast<int32_t>(0.5 + k * (1 << kPilPrecisionBits));
    }
    t.first[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = n;
  }
  return t;
}

// Pillow's clip8: drop the fraction, clamp to a byte. Bilinear weights are >= 0 and round up by at
// most half a unit each, so the clamp binds only past a shrink of about 8000x.
uint8_t pil_clip8(int32_t sum) { return static_cast<uint8_t>(std::clamp<int32_t>(sum >> kPilPrecisionBits, 0, 255)); }

// Rows of `src` (`width` wide, `stride` apart; row 0 is source row `row0`) resampled down into
// `out`. Integer sums are exact, so accumulating a whole row per tap (which vectorises) gives
// Pillow's per-pixel result.
MOCO_AVX2_CLONE void pil_pass_down(const uint8_t* src, int64_t stride, int64_t width, int64_t row0, const PilTaps& taps,
                                   uint8_t* out) {
  std::vector<int32_t> acc(static_cast<size_t>(width));
  for (size_t y = 0; y < taps.first.size(); ++y) {
    std::fill(acc.begin(), acc.end(), kPilHalf);
    const int32_t* k = taps.weights.data() + static_cast<int64_t>(y) * taps.width;
    for (int64_t j = 0; j < taps.count[y]; ++j) {
      const uint8_t* line = src + (taps.first[y] - row0 + j) * stride;
      const int32_t kj = k[j];
      for (int64_t x = 0; x < width; ++x) acc[static_cast<size_t>(x)] += static_cast<int32_t>(line[x]) * kj;
    }
    uint8_t* dst = out + static_cast<int64_t>(y) * width;
    for (int64_t x = 0; x < width; ++x) dst[x] = pil_clip8(acc[static_cast<size_t>(x)]);
  }
}

// `rows` rows of one channel (`width` wide, `stride` apart) resampled across into `out`
// (rows x taps.first.size()): as a pass down the transposed rows, which vectorises; the sums are
// the same integers.
void pil_pass_across(const uint8_t* src, int64_t stride, int64_t rows, int64_t width, const PilTaps& taps,
                     uint8_t* out) {
  const auto out_width = static_cast<int64_t>(taps.first.size());
  std::vector<uint8_t> lines(static_cast<size_t>(width * rows)), resampled(static_cast<size_t>(out_width * rows));
  transpose_plane(src, rows, width, stride, lines.data());
  pil_pass_down(lines.data(), rows, rows, 0, taps, resampled.data());
  transpose_plane(resampled.data(), out_width, rows, rows, out);
}

}  // namespace

Image pil_resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width) {
  if (box.height <= 0 || box.width <= 0 || box.top < 0 || box.left < 0 || box.top + box.height > image.height ||
      box.left + box.width > image.width || out_height <= 0 || out_width <= 0) {
    throw std::invalid_argument(
        "pil_resized_crop: box " + std::to_string(box.width) + "x" + std::to_string(box.height) + "+" +
        std::to_string(box.left) + "+" + std::to_string(box.top) + " of a " + std::to_string(image.width) + "x" +
        std::to_string(image.height) + " image to " + std::to_string(out_width) + "x" + std::to_string(out_height));
  }
  // Pillow skips a pass whose size is unchanged (it would be the identity anyway).
  const bool across = out_width != box.width, down = out_height != box.height;
  Image out(image.channels, out_height, out_width);
  const PilTaps rows = pil_taps(box.height, out_height);
  // The horizontal pass covers only the rows that the vertical pass reads, as Pillow's does.
  const int64_t row0 = down ? rows.first.front() : 0;
  const int64_t row1 = down ? rows.first.back() + rows.count.back() : box.height;
  const PilTaps cols = across ? pil_taps(box.width, out_width) : PilTaps{};
  std::vector<uint8_t> temp(across && down ? static_cast<size_t>((row1 - row0) * out_width) : 0);
  for (int64_t c = 0; c < image.channels; ++c) {
    const uint8_t* src = image.channel(c) + box.top * image.width + box.left;
    uint8_t* dst = out.channel(c);
    if (across && down) {
      pil_pass_across(src + row0 * image.width, image.width, row1 - row0, box.width, cols, temp.data());
      pil_pass_down(temp.data(), out_width, out_width, row0, rows, dst);
    } else if (across) {
      pil_pass_across(src, image.width, box.height, box.width, cols, dst);
    } else if (down) {
      pil_pass_down(src, image.width, box.width, 0, rows, dst);
    } else {
      for (int64_t y = 0; y < box.height; ++y) std::copy_n(src + y * image.width, box.width, dst + y * box.width);
    }
  }
  return out;
}

}  // namespace moco::data
