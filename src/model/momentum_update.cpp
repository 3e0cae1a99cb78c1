#include "model/momentum_update.h"

#include <torch/torch.h>

#include <stdexcept>

namespace moco::model {

void momentum_update(const std::vector<torch::Tensor>& targets, const std::vector<torch::Tensor>& sources, double m) {
  if (targets.size() != sources.size())
    throw std::logic_error("momentum_update: the momentum encoder and the encoder hold different numbers of tensors");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) {
    auto k = targets[i];
    k.mul_(m).add_(sources[i], 1.0 - m);
  }
}

}  // namespace moco::model
