// defines: positive_rank_accuracies, a contrastive task's acc@k (%) from the rank of each positive
// among its negatives (MoCo's top-1 and top-5)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace moco::model {

// For each k: how often the positive outscores all but fewer than k negatives, as (100 * count) / n
// in float64 on positive_rank's device ([ks.size()], nothing read on the host). positive_rank: [n]
// integer, how many negatives score above each positive.
torch::Tensor positive_rank_accuracies(const torch::Tensor& positive_rank, const std::vector<int64_t>& ks);

}  // namespace moco::model
