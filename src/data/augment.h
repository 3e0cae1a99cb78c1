// defines: AugmentOptions, augment_batch (MoCo's random resized crop, flip, colour jitter,
// normalisation, done on a whole batch at once), normalize_batch (evaluation)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace moco::data {

struct AugmentOptions {
  int64_t out_size = 28;                           // output is out_size x out_size
  double scale_min = 0.2, scale_max = 1.0;         // crop area as a fraction of the image
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double flip_prob = 0.5;                          // horizontal
  double jitter_prob = 0.8;                        // brightness/contrast, applied with this probability
  double brightness = 0.4, contrast = 0.4;         // factors drawn from [1-x, 1+x]
  std::vector<double> mean{0.5}, std{0.5};         // per channel (one value broadcasts)
};

// uint8 [n, C, H, W] -> float [n, C, out, out]. Sample i draws its crop, flip and jitter from
// std::mt19937_64(sample_seeds[i]) alone, so a sample's view does not depend on which batch, rank
// or thread it lands in.
torch::Tensor augment_batch(const torch::Tensor& images, const AugmentOptions& options,
                            const std::vector<uint64_t>& sample_seeds);

// The seed of one view of one sample in one epoch (a hash of all four).
uint64_t view_seed(uint64_t seed, int64_t epoch, int64_t index, int view);

// uint8 [n, C, H, W] -> float [n, C, H, W] scaled to [0,1] and normalised, no randomness.
torch::Tensor normalize_batch(const torch::Tensor& images, const AugmentOptions& options);

}  // namespace moco::data
