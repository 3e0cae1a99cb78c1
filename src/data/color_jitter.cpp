#include "data/color_jitter.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace moco::data {
namespace {

// torchvision's _blend on uint8: (ratio * a + (1 - ratio) * b).clamp(0, 255).to(uint8). The
// Python floats become float32 scalars; .to(uint8) truncates.
uint8_t blend(float ratio, float one_minus_ratio, float a, float b) {
  const float v = ratio * a + one_minus_ratio * b;
  return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
}

// rgb_to_grayscale: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), evaluated left to right in float32.
uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  const float v = 0.2989f * static_cast<float>(r) + 0.587f * static_cast<float>(g) + 0.114f * static_cast<float>(b);
  return static_cast<uint8_t>(v);
}

void check_factor(double factor, const char* what) {
  if (!(factor >= 0) || !std::isfinite(factor))
    throw std::invalid_argument(std::string(what) + " factor must be finite and non-negative, got " +
                                std::to_string(factor));
}

}  // namespace

void adjust_brightness(Image& image, double factor) {
  check_factor(factor, "brightness");
  const auto ratio = static_cast<float>(factor);
  for (uint8_t& p : image.pixels) p = blend(ratio, 0.0f, static_cast<float>(p), 0.0f);
}

void adjust_contrast(Image& image, double factor) {
  check_factor(factor, "contrast");
  // The anchor: the mean of the (truncated) greyscale image, as a float32 tensor mean.
  double sum = 0.0;
  const int64_t n = image.plane();
  if (image.channels == 3) {
    const uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
    for (int64_t i = 0; i < n; ++i) sum += luma(r[i], g[i], b[i]);
  } else {
    for (uint8_t p : image.pixels) sum += p;
  }
  const auto count = static_cast<double>(image.channels == 3 ? n : static_cast<int64_t>(image.pixels.size()));
  const auto mean = static_cast<float>(count > 0 ? sum / count : 0.0);
  const auto ratio = static_cast<float>(factor), rest = static_cast<float>(1.0 - factor);
  for (uint8_t& p : image.pixels) p = blend(ratio, rest, static_cast<float>(p), mean);
}

void adjust_saturation(Image& image, double factor) {
  check_factor(factor, "saturation");
  if (image.channels != 3) return;
  const auto ratio = static_cast<float>(factor), rest = static_cast<float>(1.0 - factor);
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) {
    const auto gray = static_cast<float>(luma(r[i], g[i], b[i]));
    r[i] = blend(ratio, rest, static_cast<float>(r[i]), gray);
    g[i] = blend(ratio, rest, static_cast<float>(g[i]), gray);
    b[i] = blend(ratio, rest, static_cast<float>(b[i]), gray);
  }
}

// torchvision's _rgb2hsv, the shift (h + hue) % 1.0 and _hsv2rgb, per pixel in float32 with the
// same operations in the same order, so the result is the same bits. fmod and floor become a
// compare and subtract where the range makes that exact (a quarter faster than the library calls:
// the hue is the costliest step of a v2 view).
void adjust_hue(Image& image, double hue_factor) {
  if (!(hue_factor >= -0.5 && hue_factor <= 0.5))
    throw std::invalid_argument("hue factor must lie in [-0.5, 0.5], got " + std::to_string(hue_factor));
  if (image.channels != 3) return;
  const auto shift = static_cast<float>(hue_factor);
  uint8_t *R = image.channel(0), *G = image.channel(1), *B = image.channel(2);
  const int64_t n = image.plane();
  for (int64_t i = 0; i < n; ++i) {
    const float r = static_cast<float>(R[i]) / 255.0f, g = static_cast<float>(G[i]) / 255.0f,
                b = static_cast<float>(B[i]) / 255.0f;
    // _rgb2hsv
    const float maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
    const bool eqc = maxc == minc;
    const float cr = maxc - minc;
    const float s = cr / (eqc ? 1.0f : maxc);
    const float divisor = eqc ? 1.0f : cr;
    const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
    const float hr = maxc == r ? bc - gc : 0.0f;
    const float hg = (maxc == g && maxc != r) ? 2.0f + rc - bc : 0.0f;
    const float hb = (maxc != g && maxc != r) ? 4.0f + gc - rc : 0.0f;
    float h = (hr + hg + hb) / 6.0f + 1.0f;  // in [5/6, 11/6]: fmod(h, 1) is h - 1 past 1, exactly
    h = h >= 1.0f ? h - 1.0f : h;
    // (h + hue) % 1.0 as torch.remainder, h - floor(h), for h + hue in [-0.5, 1.5)
    h += shift;
    h = h < 0.0f ? h + 1.0f : (h >= 1.0f ? h - 1.0f : h);
    // _hsv2rgb
    const float h6 = h * 6.0f;
    const int sector_floor = static_cast<int>(h6);  // floor: h6 >= 0
    const float f = h6 - static_cast<float>(sector_floor);
    const int sector = sector_floor == 6 ? 0 : sector_floor;  // % 6 (h may round up to 1.0)
    const float v = maxc;
    const float p = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
    const float q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f);
    const float t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
    // The rows of torchvision's a1, a2, a3 stacks, picked by the sector.
    const float rr = (sector == 0 || sector == 5) ? v : sector == 1 ? q : (sector == 2 || sector == 3) ? p : t;
    const float gg = sector == 0 ? t : (sector == 1 || sector == 2) ? v : sector == 3 ? q : p;
    const float bb = (sector == 0 || sector == 1) ? p : sector == 2 ? t : (sector == 3 || sector == 4) ? v : q;
    R[i] = static_cast<uint8_t>(rr * 255.0f);  // .to(uint8) truncates
    G[i] = static_cast<uint8_t>(gg * 255.0f);
    B[i] = static_cast<uint8_t>(bb * 255.0f);
  }
}

void to_grayscale(Image& image) {
  if (image.channels != 3) return;
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) r[i] = g[i] = b[i] = luma(r[i], g[i], b[i]);
}

void apply_jitter(Image& image, const JitterParams& p, const JitterOps& ops) {
  for (int op : p.order) {
    switch (op) {
      case 0:
        if (p.brightness != 1.0) ops.brightness(image, p.brightness);
        break;
      case 1:
        if (p.contrast != 1.0) ops.contrast(image, p.contrast);
        break;
      case 2:
        if (p.saturation != 1.0) ops.saturation(image, p.saturation);
        break;
      case 3:
        if (p.hue != 0.0) ops.hue(image, p.hue);
        break;
      default:
        throw std::invalid_argument("color_jitter: operation " + std::to_string(op) + " is not 0..3");
    }
  }
}

void color_jitter(Image& image, const JitterParams& p) {
  apply_jitter(image, p, {adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue});
}

}  // namespace moco::data
