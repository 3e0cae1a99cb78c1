// defines: augment_batch (two-view training augmentation of a uint8 batch), view_seed, options_of_view,
// normalize_batch (evaluation); Recipe and AugmentOptions come from data/augment_options.h
#pragma once

#include "data/augment_options.h"

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moco::data {

// uint8 [n, C, H, W] -> float [n, C, out, out]. Sample i draws its random parameters from
// std::mt19937_64(sample_seeds[i]) alone, so a sample's view does not depend on which batch, rank
// or thread it lands in. view_type kUInt8: the views' uint8 pixels before ToTensor + Normalize
// instead (recipes v1, v2, v3; the simple recipe works in float and refuses it). Throws
// std::invalid_argument on bad options or shapes.
torch::Tensor augment_batch(const torch::Tensor& images, const AugmentOptions& options,
                            const std::vector<uint64_t>& sample_seeds, torch::Dtype view_type = torch::kFloat);

// The seed of one view of one sample in one epoch (a hash of all four).
uint64_t view_seed(uint64_t seed, int64_t epoch, int64_t index, int view);

// The options that view `view` of a sample (0: the query, moco-v3's first; 1: the key, its second)
// is drawn and made with: v3's second view takes key_blur_prob and key_solarize_prob as its
// blur_prob and solarize_prob; the views of the other recipes share `options`.
AugmentOptions options_of_view(const AugmentOptions& options, int view);

// uint8 [n, C, H, W] -> float [n, C, H, W] scaled to [0,1] and normalised, no randomness.
torch::Tensor normalize_batch(const torch::Tensor& images, const AugmentOptions& options);

}  // namespace moco::data
