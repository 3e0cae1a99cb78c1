#include "run/sgd.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::run {

MomentumSgd::MomentumSgd(std::vector<torch::Tensor> parameters, double momentum, double weight_decay)
    : parameters_(std::move(parameters)), momentum_(momentum), weight_decay_(weight_decay) {
  // In the parameter's memory order (channels-last convolutions included): the update is then
  // element by element over matching strides, with no permuting copy.
  for (const auto& p : parameters_) buffers_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
}

void MomentumSgd::zero_grad() {
  RECORD_USER_SCOPE("update/zero_grad");  // Note [Update scopes] (sys/op_count.h)
  for (auto& p : parameters_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

void MomentumSgd::step(const torch::Tensor& apply) {
  RECORD_USER_SCOPE("update/sgd");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    auto& p = parameters_[i];
    if (!p.grad().defined()) continue;
    auto d = p.grad();
    if (weight_decay_ != 0) d = d.add(p, weight_decay_);
    if (!apply.defined()) {
      buffers_[i].mul_(momentum_).add_(d);
      p.add_(buffers_[i], -lr_);
      continue;
    }
    // The same kernels out of place, then kept only where `apply`.
    const auto buffer = buffers_[i].mul(momentum_).add_(d);
    const auto moved = p.add(buffer, -lr_);
    buffers_[i].copy_(torch::where(apply, buffer, buffers_[i]));
    p.copy_(torch::where(apply, moved, p));
  }
}

}  // namespace moco::run
