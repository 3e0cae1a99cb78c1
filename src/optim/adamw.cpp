#include "optim/adamw.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cmath>

namespace moco::optim {

AdamW::AdamW(std::vector<torch::Tensor> parameters, double weight_decay)
    : params_(std::move(parameters)), steps_(torch::zeros({}, torch::kLong)), weight_decay_(weight_decay) {
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::zero_grad() {
  for (const auto& p : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

void AdamW::step() {
  RECORD_USER_SCOPE("update/adamw");
  torch::NoGradGuard no_grad;
  steps_.add_(1);
  const auto t = static_cast<double>(steps_.item<int64_t>());  // host read: a CPU tensor, no device wait
  const double step_size = lr_ / (1.0 - std::pow(kBeta1, t));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(kBeta2, t));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (!p.grad().defined()) continue;
    const auto& g = p.grad();
    p.mul_(1.0 - lr_ * weight_decay_);
    exp_avg_[i].mul_(kBeta1).add_(g, 1.0 - kBeta1);
    exp_avg_sq_[i].mul_(kBeta2).addcmul_(g, g, 1.0 - kBeta2);
    const auto denom = (exp_avg_sq_[i].sqrt() / bias2_sqrt).add_(kEps);
    p.addcdiv_(exp_avg_[i], denom, -step_size);
  }
}

}  // namespace moco::optim
