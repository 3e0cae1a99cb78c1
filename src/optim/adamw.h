// defines: AdamW, torch.optim.AdamW's update (the official moco-v3 optimizer for ViT) with its state
// in plain named tensors for checkpoints
#pragma once

#include <torch/types.h>

#include <vector>

namespace moco::optim {

// torch.optim.AdamW with its defaults (betas 0.9 and 0.999, eps 1e-8, no amsgrad), weight decay
// decoupled and on every parameter, as main_moco.py builds it over model.parameters(): at step t,
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// A parameter without a gradient is left alone. t counts the steps applied: it lives on the
// parameters' device, so that a step skipped there (step(apply)) does not count and the host never
// waits to learn which did; the bias corrections are computed there from it in fp64 (std::pow's
// values on a CPU, bit for bit LibTorch's AdamW, whose scalars are the host's).
class AdamW {
 public:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

  AdamW(std::vector<torch::Tensor> parameters, double weight_decay);
  void set_lr(double lr) { lr_ = lr; }
  void zero_grad();
  // With `apply` (a bool scalar on the parameters' device) false, parameters, both moments and the
  // step count keep their values; true or undefined, the update above, bit for bit.
  void step(const torch::Tensor& apply = {});
  // One per parameter, same order and shape; and the steps applied (an int64 scalar on the
  // parameters' device).
  const std::vector<torch::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<torch::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  const torch::Tensor& steps() const { return steps_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }

 private:
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
  torch::Tensor steps_;
  double weight_decay_, lr_ = 0;
};

}  // namespace moco::optim
