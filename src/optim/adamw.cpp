#include "optim/adamw.h"

#include "optim/masked_update.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::optim {

AdamW::AdamW(std::vector<torch::Tensor> parameters, double weight_decay)
    : params_(std::move(parameters)), weight_decay_(weight_decay) {
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_[0].device();
  steps_ = torch::zeros({}, torch::dtype(torch::kLong).device(device));
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::zero_grad() {
  for (const auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

// Each new value is made out of place by the kernels an in-place update would use, then kept where
// `apply`. The bias corrections come from the step count on the device, in fp64 (one-element ops:
// std::pow and std::sqrt on a CPU, as LibTorch's AdamW computes them on the host), each rounded to
// float once, as a Scalar argument would be.
void AdamW::step(const torch::Tensor& apply) {
  RECORD_USER_SCOPE("update/adamw");
  torch::NoGradGuard no_grad;
  const auto t = steps_.add(1);
  const auto t_wide = t.to(torch::kDouble);
  const auto step_size =
      torch::full({}, lr_, t_wide.options()).div_(torch::pow(kBeta1, t_wide).neg_().add_(1.0)).to(torch::kFloat);
  const auto bias2_sqrt = torch::pow(kBeta2, t_wide).neg_().add_(1.0).sqrt_().to(torch::kFloat);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto& g = p.grad();
    auto moved = p.mul(1.0 - lr_ * weight_decay_);
    const auto m = exp_avg_[i].mul(kBeta1).add_(g, 1.0 - kBeta1);
    const auto v = exp_avg_sq_[i].mul(kBeta2).addcmul_(g, g, 1.0 - kBeta2);
    const auto denom = (v.sqrt() / bias2_sqrt).add_(kEps);
    moved.sub_(m.mul(step_size).div_(denom));  // addcdiv's p + (-s m) / denom, its order of operations
    keep_where(exp_avg_[i], m, apply);
    keep_where(exp_avg_sq_[i], v, apply);
    keep_where(p, moved, apply);
  }
  keep_where(steps_, t, apply);
}

}  // namespace moco::optim
