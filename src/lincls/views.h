// defines: the linear protocol's two views of an image: train_view (RandomResizedCrop + flip) and
// center_view (Resize + CenterCrop, or the image itself when it already has the size)
#pragma once

#include "data/augment.h"
#include "run/config.h"

#include <torch/types.h>

namespace moco::lincls {

// RandomResizedCrop(data.image_size, scale (lincls.crop_scale_min, 1)) and a horizontal flip with
// probability 0.5, then data.mean/std; no colour jitter.
data::AugmentOptions train_view(const run::Config& config);

// uint8 [n, C, H, W] -> float [n, C, S, S], S = normalisation.out_size, normalised: the image itself
// when it is S x S; otherwise its shorter side resized (bilinear) to S * 256/224 and the centre
// S x S cut out (torchvision's Resize(256) + CenterCrop(224) at S = 224).
torch::Tensor center_view(const torch::Tensor& images, const data::AugmentOptions& normalisation);

}  // namespace moco::lincls
