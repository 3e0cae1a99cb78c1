#include "optim/lars.h"

#include "optim/masked_update.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::optim {

Lars::Lars(std::vector<torch::Tensor> parameters, double momentum, double weight_decay)
    : params_(std::move(parameters)), momentum_(momentum), weight_decay_(weight_decay) {
  for (const auto& p : params_) buffers_.push_back(torch::zeros_like(p));
}

void Lars::zero_grad() {
  for (const auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// The trust ratio stays on the device (torch::where, no host read), as the official code keeps it.
torch::Tensor Lars::direction(const torch::Tensor& p) const {
  const auto& g = p.grad();
  if (p.dim() <= 1) return g;  // biases and BN parameters: excluded from decay and adaptation
  auto d = g.add(p, weight_decay_);
  const auto param_norm = p.norm(), update_norm = d.norm();
  const auto one = torch::ones_like(param_norm);
  const auto trust = torch::where(
      param_norm > 0, torch::where(update_norm > 0, kTrustCoefficient * param_norm / update_norm, one), one);
  return d.mul(trust);
}

// The in-place update's kernels out of place, each result kept where `apply`.
void Lars::step(const torch::Tensor& apply) {
  RECORD_USER_SCOPE("update/lars");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto buffer = buffers_[i].mul(momentum_).add_(direction(p));
    const auto moved = p.add(buffer, -lr_);
    keep_where(buffers_[i], buffer, apply);
    keep_where(p, moved, apply);
  }
}

}  // namespace moco::optim
