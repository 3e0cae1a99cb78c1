// defines: augment_view (MoCo v1/v2/v3's augmentation of one uint8 image with given parameters),
// hflip, normalize_into (uint8 -> the network's normalised float input), ViewOut, view_out and
// write_view (a view written as normalised floats or as its uint8 pixels)
#pragma once

#include "data/augment.h"
#include "data/image.h"
#include "data/view_params.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moco::data {

// The official main_moco.py pipelines, each step as torchvision does it on a PIL image
// (Transforms::kPil: pil_resize.h, pil_color.h, pil_blur.h) or on a uint8 tensor (kTensor:
// resize.h, color_jitter.h, gaussian_blur.h); the parity test checks both against torchvision:
//   v1: RandomResizedCrop -> RandomGrayscale -> ColorJitter (always) -> RandomHorizontalFlip
//   v2: RandomResizedCrop -> ColorJitter (p) -> RandomGrayscale -> GaussianBlur (p) -> RandomHorizontalFlip
//   v3: RandomResizedCrop -> ColorJitter (p) -> RandomGrayscale -> GaussianBlur (p) -> Solarize (p)
//       -> RandomHorizontalFlip, the blur's and the solarize's p those of the view (options_of_view)
// Returns the out_size x out_size uint8 view before ToTensor/Normalize.
Image augment_view(const Image& image, const ViewParams& params, Recipe recipe, Transforms transforms,
                   int64_t out_size);

// The resized crop of that implementation (the evaluation view's Resize too).
Image resized_crop(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width,
                   Transforms transforms);

void hflip(Image& image);

// ToTensor + Normalize: (x / 255 - mean[c]) / std[c] in float32, written to out[C * H * W].
// mean/std hold 1 value or one per channel (checked by the caller).
void normalize_into(const Image& image, const std::vector<double>& mean, const std::vector<double>& std, float* out);

// Where one view goes, C * S * S values: normalised floats (normalize_into) or its uint8 pixels as
// they are, for a normalisation on the device (run::PixelNormalizer). Implicit from either pointer, so
// a call site passes the buffer it has; nullptr: no view.
struct ViewOut {
  ViewOut(float* floats) : normalised(floats) {}
  ViewOut(uint8_t* bytes) : pixels(bytes) {}
  ViewOut(std::nullptr_t) {}
  float* normalised = nullptr;
  uint8_t* pixels = nullptr;
};

// Sample i's place in a batch of views [n, C, S, S], float (normalised) or uint8 (pixels).
ViewOut view_out(torch::Tensor& views, int64_t i);

// `view` into `out`: its planar pixels copied, or normalize_into.
void write_view(const Image& view, const std::vector<double>& mean, const std::vector<double>& std, ViewOut out);

}  // namespace moco::data
