// Pillow's bilinear resize and GaussianBlur on known pixels: each expected output is what Pillow 9.4
// (Debian 12's python3-pil) returns for the same 6x8 ramp, as the comment above it writes the call.
// The comparison with Pillow itself over photographs and the parameters' ranges is the parity test
// (tests/parity/augment_parity.py, ctest data.augment_parity_torchvision).
#include "data/pil_blur.h"
#include "data/pil_resize.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace {

using namespace moco::data;

// One channel, 6 rows of 8: value (37 i) mod 256 at row-major index i.
Image pil_ramp() {
  Image x(1, 6, 8);
  for (size_t i = 0; i < x.pixels.size(); ++i) x.pixels[i] = static_cast<uint8_t>((i * 37) % 256);
  return x;
}

TEST(PilOpsTest, ResizeShrinksABoxAsPillow) {
  // im.crop((1, 1, 8, 6)).resize((3, 2), Image.BILINEAR)
  EXPECT_EQ(pil_resized_crop(pil_ramp(), {1, 1, 5, 7}, 2, 3).pixels,
            (std::vector<uint8_t>{147, 140, 68, 154, 83, 131}));
}

TEST(PilOpsTest, ResizeEnlargesABoxAsPillow) {
  // im.crop((2, 0, 5, 3)).resize((5, 4), Image.BILINEAR)
  EXPECT_EQ(pil_resized_crop(pil_ramp(), {0, 2, 3, 3}, 4, 5).pixels,
            (std::vector<uint8_t>{74,  89,  111, 133, 148, 99,  114, 136, 158, 173,
                                  129, 144, 166, 188, 203, 154, 169, 191, 213, 228}));
}

TEST(PilOpsTest, ResizeOfOneAxisOnlyLeavesTheOtherAlone) {
  // im.resize((3, 6), Image.BILINEAR): only the horizontal pass runs.
  EXPECT_EQ(pil_resized_crop(pil_ramp(), {0, 0, 6, 8}, 6, 3).pixels,
            (std::vector<uint8_t>{41, 130, 144, 81, 163, 83, 121, 161, 62, 161, 122, 82, 181, 82, 122, 160, 80, 162}));
  const Image x = pil_ramp();
  EXPECT_EQ(pil_resized_crop(x, {0, 0, 6, 8}, 6, 8).pixels, x.pixels);
}

TEST(PilOpsTest, ResizeRefusesABoxOutsideTheImage) {
  EXPECT_THROW(pil_resized_crop(pil_ramp(), {1, 0, 6, 8}, 4, 4), std::invalid_argument);
  EXPECT_THROW(pil_resized_crop(pil_ramp(), {0, 0, 6, 8}, 0, 4), std::invalid_argument);
}

TEST(PilOpsTest, BlurAsPillow) {
  // im.filter(ImageFilter.GaussianBlur(r)); at 9.0 the box is wider than the image, so every
  // window is mostly replicated edge pixels.
  const std::vector<std::pair<double, std::vector<uint8_t>>> cases = {
      {0.7, {18,  46,  83,  120, 155, 177, 148, 47,  49,  77,  114, 151, 174, 155, 77,  49,
             89,  117, 152, 176, 157, 80,  61,  77,  129, 155, 179, 160, 83,  64,  88,  114,
             167, 185, 163, 85,  66,  89,  126, 154, 196, 188, 92,  63,  85,  120, 157, 185}},
      {1.6, {64,  79,  103, 125, 134, 126, 106, 90,  81,  94,  113, 128, 130, 120, 103, 90,
             108, 116, 125, 129, 124, 113, 101, 95,  134, 135, 132, 125, 116, 110, 107, 108,
             154, 147, 133, 118, 110, 110, 118, 127, 165, 152, 131, 113, 106, 113, 128, 141}},
      {9.0, {107, 107, 107, 107, 108, 108, 108, 108, 107, 107, 108, 108, 108, 108, 108, 108,
             108, 108, 108, 108, 109, 109, 109, 109, 108, 108, 109, 109, 109, 109, 109, 109,
             109, 109, 109, 109, 110, 110, 110, 110, 109, 109, 110, 110, 110, 110, 110, 110}},
  };
  for (const auto& [radius, want] : cases) {
    Image x = pil_ramp();
    pil_gaussian_blur(x, radius);
    EXPECT_EQ(x.pixels, want) << "radius " << radius;
  }
}

TEST(PilOpsTest, BlurOfRadiusZeroIsTheIdentityAndANegativeOneIsRefused) {
  Image x = pil_ramp();
  pil_gaussian_blur(x, 0.0);
  EXPECT_EQ(x.pixels, pil_ramp().pixels);
  EXPECT_THROW(pil_gaussian_blur(x, -0.5), std::invalid_argument);
  // Three boxes of radius 1.375 have variance 4 = 2^2 (the box's radius is exact here).
  EXPECT_EQ(pil_box_radius(2.0f, 3), 1.375f);
}

}  // namespace
