// defines: Image (uint8 pixels, planar C x H x W, as a torchvision uint8 tensor lays them out) and
// CropBox (a rectangle of an image)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moco::data {

// Planar like torch's [C, H, W], so each operation reads the same values in the same order as
// torchvision.transforms.functional does on a uint8 tensor.
struct Image {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // channels * height * width

  Image() = default;
  Image(int64_t c, int64_t h, int64_t w) : channels(c), height(h), width(w), pixels(static_cast<size_t>(c * h * w)) {}
  int64_t plane() const { return height * width; }
  uint8_t* channel(int64_t c) { return pixels.data() + c * plane(); }
  const uint8_t* channel(int64_t c) const { return pixels.data() + c * plane(); }
};

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

}  // namespace moco::data
