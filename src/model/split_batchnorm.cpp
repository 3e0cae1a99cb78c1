#include "model/split_batchnorm.h"

#include "model/sync_batchnorm.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace moco::model {

SplitBatchNorm2dImpl::SplitBatchNorm2dImpl(int64_t channels, int64_t splits) : channels_(channels), splits_(splits) {
  if (splits < 1) throw std::invalid_argument("SplitBatchNorm2d needs splits >= 1");
  reset();
}

void SplitBatchNorm2dImpl::reset() {
  weight = register_parameter("weight", torch::ones({channels_}));
  bias = register_parameter("bias", torch::zeros({channels_}));
  running_mean = register_buffer("running_mean", torch::zeros({channels_}));
  running_var = register_buffer("running_var", torch::ones({channels_}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

void SplitBatchNorm2dImpl::set_group(std::shared_ptr<dist::ProcessGroup> group) {
  if (splits_ != 1)
    throw std::invalid_argument("SplitBatchNorm2d: " + std::to_string(splits_) +
                                " splits normalise groups apart; it cannot also normalise across ranks");
  group_ = std::move(group);
}

torch::Tensor SplitBatchNorm2dImpl::forward(const torch::Tensor& input) {
  if (!is_training()) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, false, momentum_, eps_, true);
  }
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  if (group_) return sync_batch_norm(input, weight, bias, running_mean, running_var, momentum_, eps_, *group_);
  if (splits_ == 1) {
    return torch::batch_norm(input, weight, bias, running_mean, running_var, true, momentum_, eps_, true);
  }
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  if (n % splits_ != 0)
    throw std::invalid_argument("SplitBatchNorm2d: a batch of " + std::to_string(n) + " does not split into " +
                                std::to_string(splits_) + " equal groups");
  const int64_t g = splits_;
  // Group j's channels become channels [j*c, (j+1)*c) of one wide batch, so a single batch_norm
  // call normalises every group by its own statistics.
  const auto wide = input.view({g, n / g, c, h, w}).transpose(0, 1).reshape({n / g, g * c, h, w});
  auto mean = running_mean.repeat({g});
  auto var = running_var.repeat({g});
  const auto out =
      torch::batch_norm(wide, weight.repeat({g}), bias.repeat({g}), mean, var, true, momentum_, eps_, true);
  {
    torch::NoGradGuard no_grad;
    running_mean.copy_(mean.view({g, c}).mean(0));
    running_var.copy_(var.view({g, c}).mean(0));
  }
  return out.view({n / g, g, c, h, w}).transpose(0, 1).reshape({n, c, h, w});
}

}  // namespace moco::model
