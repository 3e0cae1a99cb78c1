// The PIL-equal colour operations (src/data/pil_color.h) on six known pixels, the expected values
// printed by torchvision 0.14 + Pillow 9.4 (torchvision.transforms.functional on
// Image.fromarray of the same pixels). The whole-image check against PIL itself is
// tests/parity/augment_parity.py (ctest data.augment_parity_torchvision).
#include "data/pil_color.h"

#include <gtest/gtest.h>

#include <array>
#include <stdexcept>
#include <vector>

namespace {

using namespace moco::data;
using Pixels = std::vector<std::array<int, 3>>;

// Six RGB pixels in a row; their luma mean is 85.5, which Contrast rounds to 86.
Image six_pixels() {
  const Pixels rgb = {{10, 200, 30}, {255, 0, 0}, {120, 121, 122}, {0, 0, 255}, {250, 10, 200}, {33, 66, 99}};
  Image x(3, 1, static_cast<int64_t>(rgb.size()));
  for (size_t i = 0; i < rgb.size(); ++i)
    for (int c = 0; c < 3; ++c) x.channel(c)[i] = static_cast<uint8_t>(rgb[i][static_cast<size_t>(c)]);
  return x;
}

Pixels pixels_of(const Image& x) {
  Pixels out(static_cast<size_t>(x.width));
  for (size_t i = 0; i < out.size(); ++i)
    for (int c = 0; c < 3; ++c) out[i][static_cast<size_t>(c)] = x.channel(c)[i];
  return out;
}

template <class Op>
Pixels applied(Op op) {
  Image x = six_pixels();
  op(x);
  return pixels_of(x);
}

TEST(PilColorTest, GrayscaleRoundsAsPillowDoes) {
  // torchvision's tensor luma truncates: 123, 76, 120, 29, 103, 59.
  EXPECT_EQ(applied([](Image& x) { pil::to_grayscale(x); }),
            (Pixels{{124, 124, 124}, {76, 76, 76}, {121, 121, 121}, {29, 29, 29}, {103, 103, 103}, {60, 60, 60}}));
}

TEST(PilColorTest, BrightnessInterpolatesAndExtrapolates) {
  EXPECT_EQ(applied([](Image& x) { pil::adjust_brightness(x, 0.6); }),
            (Pixels{{6, 120, 18}, {153, 0, 0}, {72, 72, 73}, {0, 0, 153}, {150, 6, 120}, {19, 39, 59}}));
  EXPECT_EQ(applied([](Image& x) { pil::adjust_brightness(x, 1.4); }),
            (Pixels{{14, 255, 42}, {255, 0, 0}, {168, 169, 170}, {0, 0, 255}, {255, 14, 255}, {46, 92, 138}}));
}

TEST(PilColorTest, ContrastAnchorsOnTheRoundedMeanLuma) {
  EXPECT_EQ(applied([](Image& x) { pil::adjust_contrast(x, 0.6); }),
            (Pixels{{40, 154, 52}, {187, 34, 34}, {106, 107, 107}, {34, 34, 187}, {184, 40, 154}, {54, 74, 93}}));
  EXPECT_EQ(applied([](Image& x) { pil::adjust_contrast(x, 1.4); }),
            (Pixels{{0, 245, 7}, {255, 0, 0}, {133, 135, 136}, {0, 0, 255}, {255, 0, 245}, {11, 58, 104}}));
}

TEST(PilColorTest, SaturationBlendsWithTheImagesOwnGrey) {
  EXPECT_EQ(applied([](Image& x) { pil::adjust_saturation(x, 1.4); }),
            (Pixels{{0, 230, 0}, {255, 0, 0}, {119, 121, 122}, {0, 0, 255}, {255, 0, 238}, {22, 68, 114}}));
}

TEST(PilColorTest, HueShiftsInUint8HsvAndWrapsNegativeFactors) {
  EXPECT_EQ(pil::hue_shift(-0.1), 231);  // np.uint8(-25.5): truncated to -25, wrapped
  EXPECT_EQ(pil::hue_shift(-0.5), 129);
  EXPECT_EQ(pil::hue_shift(0.5), 127);
  EXPECT_EQ(pil::hue_shift(-0.001), 0);
  EXPECT_EQ(applied([](Image& x) { pil::adjust_hue(x, -0.1); }),
            (Pixels{{104, 200, 10}, {255, 0, 144}, {120, 122, 122}, {0, 150, 255}, {157, 11, 250}, {33, 99, 92}}));
  EXPECT_EQ(applied([](Image& x) { pil::adjust_hue(x, 0.5); }),
            (Pixels{{200, 10, 184}, {0, 255, 252}, {122, 121, 120}, {255, 246, 0}, {11, 250, 50}, {99, 63, 33}}));
  // No shift, yet the uint8 HSV round trip moves some pixels, as in PIL.
  EXPECT_EQ(applied([](Image& x) { pil::adjust_hue(x, 0.0); }),
            (Pixels{{10, 200, 28}, {255, 0, 0}, {120, 121, 122}, {0, 0, 255}, {250, 11, 202}, {33, 67, 99}}));
}

TEST(PilColorTest, OneChannelImages) {
  Image g(1, 1, 3);
  g.pixels = {0, 100, 255};
  Image s = g, h = g, c = g;
  pil::adjust_saturation(s, 0.0);
  pil::adjust_hue(h, 0.3);
  EXPECT_EQ(s.pixels, g.pixels);
  EXPECT_EQ(h.pixels, g.pixels);
  pil::adjust_contrast(c, 0.0);  // mean 118.33 -> 118
  EXPECT_EQ(c.pixels, (std::vector<uint8_t>{118, 118, 118}));
}

// ImageOps.solarize(im) (moco-v3's Solarize) of Pillow 9.4 on an "L" row across the threshold and on
// two RGB pixels, each channel mapped alike: 128 is the first value inverted.
TEST(PilColorTest, SolarizeInvertsFrom128UpAsPillow) {
  Image l(1, 1, 10);
  l.pixels = {0, 1, 64, 126, 127, 128, 129, 200, 254, 255};
  pil::solarize(l);
  EXPECT_EQ(l.pixels, (std::vector<uint8_t>{0, 1, 64, 126, 127, 127, 126, 55, 1, 0}));
  Image rgb(3, 1, 2);  // planar: R of both pixels, then G, then B
  rgb.pixels = {0, 129, 127, 255, 128, 64};
  pil::solarize(rgb);
  EXPECT_EQ(rgb.pixels, (std::vector<uint8_t>{0, 126, 127, 0, 127, 64}));
}

TEST(PilColorTest, BadFactorsAreRefused) {
  Image x = six_pixels();
  EXPECT_THROW(pil::adjust_brightness(x, -0.1), std::invalid_argument);
  EXPECT_THROW(pil::adjust_hue(x, 0.6), std::invalid_argument);
  JitterParams p;
  p.order = {0, 1, 2, 4};
  EXPECT_THROW(pil::color_jitter(x, p), std::invalid_argument);
}

}  // namespace
