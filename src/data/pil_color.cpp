#include "data/pil_color.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

// The float/double mix below is Pillow's own: its C code mixes float variables with double
// literals (2.0, 6.0, 255.0), so each step is written with the type C gives it there. The build
// must not fuse a * b + c into one FMA (no -mfma/-march=native: GCC contracts by default when it
// may), or the last bit of a blend can differ from Pillow's.
namespace moco::data::pil {
namespace {

void check_factor(double factor, const char* what) {
  if (!(factor >= 0) || !std::isfinite(factor))
    throw std::invalid_argument(std::string("PIL ") + what + " factor must be finite and non-negative, got " +
                                std::to_string(factor));
}

uint8_t clip8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Blends every pixel with a degenerate image of one flat value (Brightness's black, Contrast's grey).
void blend_with_flat(Image& image, uint8_t degenerate, float alpha) {
  for (uint8_t& p : image.pixels) p = blend(degenerate, p, alpha);
}

// The "L" image's histogram mean as ImageStat computes it (an exact integer sum over a count, in
// double), rounded as ImageEnhance.Contrast does: int(mean + 0.5).
uint8_t rounded_mean_luma(const Image& image) {
  int64_t sum = 0;
  const int64_t n = image.plane();
  if (n == 0) return 0;
  if (image.channels == 3) {
    const uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
    for (int64_t i = 0; i < n; ++i) sum += luma(r[i], g[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) sum += image.channel(0)[i];
  }
  const double mean = static_cast<double>(sum) / static_cast<double>(n);
  return static_cast<uint8_t>(mean + 0.5);
}

struct Hsv {
  uint8_t h, s, v;
};

// Convert.c's rgb2hsv (after colorsys.py).
Hsv rgb_to_hsv(uint8_t r, uint8_t g, uint8_t b) {
  const uint8_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  if (minc == maxc) return {0, 0, maxc};
  const auto cr = static_cast<float>(maxc - minc);
  const float s = cr / static_cast<float>(maxc);
  const float rc = static_cast<float>(maxc - r) / cr, gc = static_cast<float>(maxc - g) / cr,
              bc = static_cast<float>(maxc - b) / cr;
  float h;
  if (r == maxc)
    h = bc - gc;
  else if (g == maxc)
    h = static_cast<float>(2.0 + static_cast<double>(rc) - static_cast<double>(bc));
  else
    h = static_cast<float>(4.0 + static_cast<double>(gc) - static_cast<double>(rc));
  h = static_cast<float>(std::fmod(static_cast<double>(h) / 6.0 + 1.0, 1.0));
  return {clip8(static_cast<int>(static_cast<double>(h) * 255.0)),
          clip8(static_cast<int>(static_cast<double>(s) * 255.0)), maxc};
}

// Convert.c's hsv2rgb: the sector from h * 6 / 255, p, q, t rounded half away from zero.
std::array<uint8_t, 3> hsv_to_rgb(Hsv in) {
  const uint8_t v = in.v;
  if (in.s == 0) return {v, v, v};
  const double h6 = static_cast<double>(in.h) * 6.0 / 255.0;
  const int i = static_cast<int>(std::floor(h6));  // 0..6 (6 only for h = 255, where f = 0)
  const auto f = static_cast<float>(h6 - static_cast<double>(i));
  const auto fs = static_cast<float>(static_cast<double>(in.s) / 255.0);
  const double vd = v;
  const uint8_t p = clip8(static_cast<int>(std::round(vd * (1.0 - static_cast<double>(fs)))));
  const uint8_t q = clip8(static_cast<int>(std::round(vd * (1.0 - static_cast<double>(fs * f)))));
  const uint8_t t =
      clip8(static_cast<int>(std::round(vd * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f))))));
  switch (i % 6) {
    case 0:
      return {v, t, p};
    case 1:
      return {q, v, p};
    case 2:
      return {p, v, t};
    case 3:
      return {p, q, v};
    case 4:
      return {t, p, v};
    default:
      return {v, p, q};
  }
}

}  // namespace

uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

uint8_t blend(uint8_t degenerate, uint8_t value, float alpha) {
  if (alpha == 0.0f) return degenerate;  // Blend.c's shortcuts: a copy of either image
  if (alpha == 1.0f) return value;
  const float v = static_cast<float>(degenerate) + alpha * static_cast<float>(value - degenerate);
  if (alpha >= 0.0f && alpha <= 1.0f) return static_cast<uint8_t>(v);  // between the two: no clipping
  if (v <= 0.0f) return 0;
  if (v >= 255.0f) return 255;
  return static_cast<uint8_t>(v);
}

uint8_t hue_shift(double hue_factor) {
  return static_cast<uint8_t>(static_cast<int>(hue_factor * 255.0));  // int -> uint8 wraps mod 256
}

void adjust_brightness(Image& image, double factor) {
  check_factor(factor, "brightness");
  blend_with_flat(image, 0, static_cast<float>(factor));
}

void adjust_contrast(Image& image, double factor) {
  check_factor(factor, "contrast");
  blend_with_flat(image, rounded_mean_luma(image), static_cast<float>(factor));
}

void adjust_saturation(Image& image, double factor) {
  check_factor(factor, "saturation");
  if (image.channels != 3) return;  // convert("L").convert("L") is the image itself: blend is a copy
  const auto alpha = static_cast<float>(factor);
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) {
    const uint8_t gray = luma(r[i], g[i], b[i]);
    r[i] = blend(gray, r[i], alpha);
    g[i] = blend(gray, g[i], alpha);
    b[i] = blend(gray, b[i], alpha);
  }
}

void adjust_hue(Image& image, double hue_factor) {
  if (!(hue_factor >= -0.5 && hue_factor <= 0.5))
    throw std::invalid_argument("PIL hue factor must lie in [-0.5, 0.5], got " + std::to_string(hue_factor));
  if (image.channels != 3) return;
  const uint8_t shift = hue_shift(hue_factor);
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) {
    Hsv hsv = rgb_to_hsv(r[i], g[i], b[i]);
    hsv.h = static_cast<uint8_t>(hsv.h + shift);
    const auto rgb = hsv_to_rgb(hsv);
    r[i] = rgb[0];
    g[i] = rgb[1];
    b[i] = rgb[2];
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
      case 0:
        if (p.brightness != 1.0) pil::adjust_brightness(image, p.brightness);
        break;
      case 1:
        if (p.contrast != 1.0) pil::adjust_contrast(image, p.contrast);
        break;
      case 2:
        if (p.saturation != 1.0) pil::adjust_saturation(image, p.saturation);
        break;
      case 3:
        if (p.hue != 0.0) pil::adjust_hue(image, p.hue);
        break;
      default:
        throw std::invalid_argument("PIL color_jitter: operation " + std::to_string(op) + " is not 0..3");
    }
  }
}

}  // namespace moco::data::pil
