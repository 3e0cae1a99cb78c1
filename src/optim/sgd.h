// defines: MomentumSgd, SGD with momentum and weight decay whose momentum buffers are plain named
// tensors, so that checkpoints save and restore them exactly
#pragma once

#include "model/flat_tensors.h"

#include <torch/types.h>

#include <vector>

namespace moco::optim {

// The update of torch.optim.SGD (dampening 0, no Nesterov): d = g + wd*p; buf = momentum*buf + d;
// p -= lr*buf. The buffers start at zero, which gives torch's first step (buf = d) bit for bit.
// (LibTorch's own SGD keeps its buffers in a map keyed by tensor addresses, whose format changed
// between versions; a checkpoint needs them by name.)
//
// Parameters, momentum buffers and gradients each live in one flat buffer of one layout (Note
// [Flat buffers] in model/flat_tensors.h), so a step is a few ops whatever the number of tensors:
// the parameters are bound to theirs at construction (where they are not already, as a MoCo
// model's are), each gradient to its slice at the first step that finds it elsewhere (copied
// there: a gradient that autograd, a reducer or a caller set anew). A step in which a parameter
// has no gradient updates tensor by tensor and leaves that parameter alone, as torch's does.
class MomentumSgd {
 public:
  // One dtype and device for all the parameters.
  MomentumSgd(std::vector<torch::Tensor> parameters, double momentum, double weight_decay);
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  void zero_grad();
  // With `apply` (a bool scalar on the parameters' device) false, parameters and buffers keep their
  // values (a step skipped on the device: see Note [Skipping a step on the device]); true or
  // undefined, the update above, bit for bit.
  void step(const torch::Tensor& apply = {});
  // Whether any gradient holds NaN or Inf, as a bool scalar on the parameters' device (no host
  // read): one reduction over the flat gradient buffer once the gradients are bound there.
  torch::Tensor nonfinite_gradients() const;
  // One per parameter, same order, shape and memory order.
  const std::vector<torch::Tensor>& momentum_buffers() const { return buffers_.tensors(); }
  const std::vector<torch::Tensor>& parameters() const { return params_.tensors(); }

 private:
  bool gradients_bound() const;
  bool bind_gradients();
  void match_buffers_to_parameters();
  void step_each(const torch::Tensor& apply);

  model::FlatTensors params_, buffers_;
  torch::Tensor grads_;  // of params_'s layout (grads_layout_)
  int64_t grads_layout_ = -1;
  double momentum_, weight_decay_, lr_ = 0;
};

}  // namespace moco::optim
