#include "model/positive_rank.h"

#include <torch/torch.h>

namespace moco::model {

torch::Tensor positive_rank_accuracies(const torch::Tensor& positive_rank, const std::vector<int64_t>& ks) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> accuracies;
  for (const int64_t k : ks)
    accuracies.push_back(
        positive_rank.lt(k).sum().to(torch::kDouble).mul(100.0).div(static_cast<double>(positive_rank.size(0))));
  return torch::stack(accuracies);
}

}  // namespace moco::model
