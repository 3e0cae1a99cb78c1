// defines: Lars, the LARS optimizer of MoCo v3 (momentum SGD whose update of each weight matrix is
// scaled by its trust ratio), its momentum buffers plain named tensors for checkpoints
#pragma once

#include <torch/types.h>

#include <vector>

namespace moco::optim {

// The update of MoCo v3's LARS (You et al. 2017 as the official moco-v3 optimizer.py applies it),
// per parameter p with gradient g:
//   p of 2 or more dims: d = g + wd p; d *= trust |p| / |d| (1 where either norm is 0)
//   p of 1 dim (biases, BN weights and biases): d = g (neither weight decay nor scaling)
//   mu = momentum mu + d;  p -= lr mu
// The buffers start at zero. A parameter without a gradient is left alone.
class Lars {
 public:
  static constexpr double kTrustCoefficient = 0.001;  // the official default

  Lars(std::vector<torch::Tensor> parameters, double momentum, double weight_decay);
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  void zero_grad();
  // With `apply` (a bool scalar on the parameters' device) false, parameters and buffers keep their
  // values (a step skipped on the device, decided without a host read); true or undefined, the
  // update above, bit for bit.
  void step(const torch::Tensor& apply = {});
  // One per parameter, same order and shape.
  const std::vector<torch::Tensor>& momentum_buffers() const { return buffers_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }

 private:
  torch::Tensor direction(const torch::Tensor& p) const;

  std::vector<torch::Tensor> params_, buffers_;
  double momentum_, weight_decay_, lr_ = 0;
};

}  // namespace moco::optim
