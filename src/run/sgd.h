// defines: MomentumSgd, SGD with momentum and weight decay whose momentum buffers are plain named
// tensors, so that checkpoints save and restore them exactly
#pragma once

#include <torch/types.h>

#include <vector>

namespace moco::run {

// The update of torch.optim.SGD (dampening 0, no Nesterov): d = g + wd*p; buf = momentum*buf + d;
// p -= lr*buf. The buffers start at zero, which gives torch's first step (buf = d) bit for bit.
// (LibTorch's own SGD keeps its buffers in a map keyed by tensor addresses, whose format changed
// between versions; a checkpoint needs them by name.)
class MomentumSgd {
 public:
  MomentumSgd(std::vector<torch::Tensor> parameters, double momentum, double weight_decay);
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  void zero_grad();
  // With `apply` (a bool scalar on the parameters' device) false, parameters and buffers keep their
  // values (a step skipped on the device: see Note [Skipping a step on the device]); true or
  // undefined, the update above, bit for bit.
  void step(const torch::Tensor& apply = {});
  // One per parameter, same order, shape and memory order.
  const std::vector<torch::Tensor>& momentum_buffers() const { return buffers_; }

 private:
  std::vector<torch::Tensor> parameters_, buffers_;
  double momentum_, weight_decay_, lr_ = 0;
};

}  // namespace moco::run
