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
    throw std::invalid_argument(std::string(what) + " factor must be finite and non-negative, got " + std::to_string(factor));
}

// torchvision's _rgb2hsv / _hsv2rgb on float32 in [0, 1], written per pixel with the same operations.
void rgb_to_hsv(float r, float g, float b, float& h, float& s, float& v) {
  const float maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  const bool eqc = maxc == minc;
  const float cr = maxc - minc;
  s = cr / (eqc ? 1.0f : maxc);
  const float divisor = eqc ? 1.0f : cr;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  const float hr = maxc == r ? bc - gc : 0.0f;
  const float hg = (maxc == g && maxc != r) ? 2.0f + rc - bc : 0.0f;
  const float hb = (maxc != g && maxc != r) ? 4.0f + gc - rc : 0.0f;
  h = std::fmod((hr + hg + hb) / 6.0f + 1.0f, 1.0f);
  v = maxc;
}

void hsv_to_rgb(float h, float s, float v, float& r, float& g, float& b) {
  const float i_float = std::floor(h * 6.0f);
  const float f = h * 6.0f - i_float;
  const int i = static_cast<int>(i_float) % 6;
  const float p = std::clamp(v * (1.0f - s), 0.0f, 1.0f);
  const float q = std::clamp(v * (1.0f - s * f), 0.0f, 1.0f);
  const float t = std::clamp(v * (1.0f - s * (1.0f - f)), 0.0f, 1.0f);
  switch (i) {
    case 0: r = v, g = t, b = p; break;
    case 1: r = q, g = v, b = p; break;
    case 2: r = p, g = v, b = t; break;
    case 3: r = p, g = q, b = v; break;
    case 4: r = t, g = p, b = v; break;
    default: r = v, g = p, b = q; break;
  }
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

void adjust_hue(Image& image, double hue_factor) {
  if (!(hue_factor >= -0.5 && hue_factor <= 0.5))
    throw std::invalid_argument("hue factor must lie in [-0.5, 0.5], got " + std::to_string(hue_factor));
  if (image.channels != 3) return;
  const auto shift = static_cast<float>(hue_factor);
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) {
    float h, s, v;
    rgb_to_hsv(static_cast<float>(r[i]) / 255.0f, static_cast<float>(g[i]) / 255.0f, static_cast<float>(b[i]) / 255.0f, h, s, v);
    h += shift;
    h -= std::floor(h);  // Python's % 1.0 (torch.remainder): the result takes the divisor's sign
    float rr, gg, bb;
    hsv_to_rgb(h, s, v, rr, gg, bb);
    r[i] = static_cast<uint8_t>(rr * 255.0f);  // .to(uint8) truncates
    g[i] = static_cast<uint8_t>(gg * 255.0f);
    b[i] = static_cast<uint8_t>(bb * 255.0f);
  }
}

void to_grayscale(Image& image) {
  if (image.channels != 3) return;
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) r[i] = g[i] = b[i] = luma(r[i], g[i], b[i]);
}

void color_jitter(Image& image, const JitterParams& p) {
  for (int op : p.order) {
    switch (op) {
      case 0: if (p.brightness != 1.0) adjust_brightness(image, p.brightness); break;
      case 1: if (p.contrast != 1.0) adjust_contrast(image, p.contrast); break;
      case 2: if (p.saturation != 1.0) adjust_saturation(image, p.saturation); break;
      case 3: if (p.hue != 0.0) adjust_hue(image, p.hue); break;
      default: throw std::invalid_argument("color_jitter: operation " + std::to_string(op) + " is not 0..3");
    }
  }
}

}  // namespace moco::data
