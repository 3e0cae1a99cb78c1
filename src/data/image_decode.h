// defines: decoding of JPEG (libjpeg-turbo) and PNG (libpng) bytes into an RGB Image, with the
// JPEG's DCT-domain downscaling when the caller needs fewer pixels (image_size, decode_image)
#pragma once

#include "data/image.h"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace moco::data {

struct ImageSize {
  int64_t height = 0, width = 0;
};

// Every failure (not a JPEG or PNG, truncated, corrupt, an unsupported colour space) throws
// DecodeError, whose message says why; the caller names the file.
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The full size, from the header alone.
ImageSize image_size(const uint8_t* bytes, size_t size);

// Decodes to 3-channel RGB, as torchvision's loader does (greyscale replicated, alpha dropped,
// 16-bit reduced to 8). A JPEG is decoded at the smallest of libjpeg-turbo's scaling factors
// (1/8 .. 1) that keeps both sides at least min_height x min_width (0: full size) — the inverse DCT
// then does the first part of the shrinking almost for free; `scale` reports the factor used.
// PNGs always decode at full size.
struct Decoded {
  Image image;
  double scale = 1.0;  // decoded side / full side
};
Decoded decode_image(const uint8_t* bytes, size_t size, int64_t min_height = 0, int64_t min_width = 0);

}  // namespace moco::data
