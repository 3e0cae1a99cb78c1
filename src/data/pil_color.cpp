#include "data/pil_color.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

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

// Blends every pixel with a degenerate image of one flat value (Brightness's black, Contrast's grey):
// then a pixel's result depends on its value alone, so blend() runs 256 times, not once a pixel.
void blend_with_flat(Image& image, uint8_t degenerate, float alpha) {
  std::array<uint8_t, 256> table{};
  for (int v = 0; v < 256; ++v) table[static_cast<size_t>(v)] = blend(degenerate, static_cast<uint8_t>(v), alpha);
  for (uint8_t& p : image.pixels) p = table[p];
}

// blend() without its branches, so that a loop of it vectorises: Blend.c's two shortcuts are the
// formula's own values (0 * x + d = d, d + (v - d) = v, exact in float), and inside [0, 1] the
// blend lies between two bytes, where the clamp does nothing.
uint8_t blend_branchless(float degenerate, float value, float alpha) {
  return static_cast<uint8_t>(std::clamp(degenerate + alpha * (value - degenerate), 0.0f, 255.0f));
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

// Convert.c's rgb2hsv (after colorsys.py). Its fmod(h / 6 + 1, 1) takes values in [5/6, 11/6]
// here, where subtracting 1 is exact: the same bits without the libm call.
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
  const double turns = static_cast<double>(h) / 6.0 + 1.0;
  h = static_cast<float>(turns >= 1.0 ? turns - 1.0 : turns);
  return {clip8(static_cast<int>(static_cast<double>(h) * 255.0)),
          clip8(static_cast<int>(static_cast<double>(s) * 255.0)), maxc};
}

// rgb_to_hsv as tables, built from it once. Its H depends only on which channel is the largest (in
// its r, g, b order of tests) and the other two channels' distances below it, its S on
// (max - min, max): so H is three 256 x 256 tables (192 KB), S one (64 KB), and a pixel costs two
// lookups instead of three float divisions.
struct RgbToHsvTables {
  std::vector<uint8_t> h_r, h_g, h_b,
      s;  // h_r[dg * 256 + db], h_g[dr * 256 + db], h_b[dr * 256 + dg], s[cr * 256 + max]
  RgbToHsvTables() : h_r(65536), h_g(65536), h_b(65536), s(65536) {
    for (int a = 0; a < 256; ++a)
      for (int b = 0; b < 256; ++b) {
        const auto i = static_cast<size_t>(a * 256 + b);
        const auto ua = static_cast<uint8_t>(255 - a), ub = static_cast<uint8_t>(255 - b);
        // Unreachable entries (the case's own tests would pick another one) are filled all the same.
        h_r[i] = rgb_to_hsv(255, ua, ub).h;
        h_g[i] = rgb_to_hsv(ua, 255, ub).h;
        h_b[i] = rgb_to_hsv(ua, ub, 255).h;
        if (a > 0 && a <= b) {  // max b, min b - a
          const auto lo = static_cast<uint8_t>(b - a);
          s[static_cast<size_t>(a * 256 + b)] = rgb_to_hsv(static_cast<uint8_t>(b), lo, lo).s;
        }
      }
  }
  Hsv operator()(uint8_t r, uint8_t g, uint8_t b) const {
    const uint8_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
    if (minc == maxc) return {0, 0, maxc};
    const int dr = maxc - r, dg = maxc - g, db = maxc - b;
    const uint8_t h = r == maxc   ? h_r[static_cast<size_t>(dg * 256 + db)]
                      : g == maxc ? h_g[static_cast<size_t>(dr * 256 + db)]
                                  : h_b[static_cast<size_t>(dr * 256 + dg)];
    return {h, s[static_cast<size_t>((maxc - minc) * 256 + maxc)], maxc};
  }
};

// C's round() for 0 <= x < 256 without the libm call: x - trunc(x) is exact there.
int round_half_away(double x) {
  const auto i = static_cast<int>(x);
  return x - static_cast<double>(i) >= 0.5 ? i + 1 : i;
}

// What hsv2rgb derives from H and S alone, computed once for all 256 values of each: the sector of
// h * 6 / 255 and its fraction f, and s / 255, with Convert.c's types.
struct HsvTables {
  std::array<uint8_t, 256> sector{};
  std::array<float, 256> f{}, fs{};
  HsvTables() {
    for (int x = 0; x < 256; ++x) {
      const double h6 = static_cast<double>(x) * 6.0 / 255.0;
      const auto i = static_cast<int>(h6);  // floor: h6 >= 0; 6 only for x = 255, where f = 0
      sector[x] = static_cast<uint8_t>(i % 6);
      f[x] = static_cast<float>(h6 - static_cast<double>(i));
      fs[x] = static_cast<float>(static_cast<double>(x) / 255.0);
    }
  }
};

// Convert.c's hsv2rgb: the sector from h * 6 / 255, p, q, t rounded half away from zero.
std::array<uint8_t, 3> hsv_to_rgb(Hsv in, const HsvTables& tables) {
  const uint8_t v = in.v;
  if (in.s == 0) return {v, v, v};
  const float f = tables.f[in.h], fs = tables.fs[in.s];
  const double vd = v;
  const uint8_t p = clip8(round_half_away(vd * (1.0 - static_cast<double>(fs))));
  const uint8_t q = clip8(round_half_away(vd * (1.0 - static_cast<double>(fs * f))));
  const uint8_t t = clip8(round_half_away(vd * (1.0 - static_cast<double>(fs) * (1.0 - static_cast<double>(f)))));
  switch (tables.sector[in.h]) {
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
    const auto gray = static_cast<float>(luma(r[i], g[i], b[i]));
    r[i] = blend_branchless(gray, r[i], alpha);
    g[i] = blend_branchless(gray, g[i], alpha);
    b[i] = blend_branchless(gray, b[i], alpha);
  }
}

void adjust_hue(Image& image, double hue_factor) {
  if (!(hue_factor >= -0.5 && hue_factor <= 0.5))
    throw std::invalid_argument("PIL hue factor must lie in [-0.5, 0.5], got " + std::to_string(hue_factor));
  if (image.channels != 3) return;
  const uint8_t shift = hue_shift(hue_factor);
  static const HsvTables tables;
  static const RgbToHsvTables to_hsv;
  uint8_t *r = image.channel(0), *g = image.channel(1), *b = image.channel(2);
  for (int64_t i = 0; i < image.plane(); ++i) {
    Hsv hsv = to_hsv(r[i], g[i], b[i]);
    hsv.h = static_cast<uint8_t>(hsv.h + shift);
    const auto rgb = hsv_to_rgb(hsv, tables);
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
  apply_jitter(image, p, {pil::adjust_brightness, pil::adjust_contrast, pil::adjust_saturation, pil::adjust_hue});
}

void solarize(Image& image) {
  constexpr int kThreshold = 128;  // ImageOps.solarize's default; moco-v3's Solarize passes none
  for (uint8_t& v : image.pixels) v = v < kThreshold ? v : static_cast<uint8_t>(255 - v);
}

}  // namespace moco::data::pil
