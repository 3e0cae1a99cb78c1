// defines: Algorithm (optim.optimizer: sgd, lars, adamw), Optimizer (the one a method trains with,
// chosen by name, its state as named tensors for checkpoints)
#pragma once

#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/sgd.h"

#include <torch/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moco::optim {

enum class Algorithm { kSgd, kLars, kAdamw };

// LARS, AdamW or SGD with momentum over `parameters`.
class Optimizer {
 public:
  Optimizer(Algorithm algorithm, std::vector<torch::Tensor> parameters, double momentum, double weight_decay);
  void set_lr(double lr);
  void zero_grad();
  // With `apply` (a bool scalar on the parameters' device) false, the parameters and the optimizer's
  // state (buffers, moments, AdamW's step count) keep their values: a step skipped on the device
  // (Note [Skipping a step on the device]); true or undefined, the update, bit for bit.
  void step(const torch::Tensor& apply = {});
  // Whether any parameter's gradient holds NaN or Inf, a bool scalar on the parameters' device (no
  // host read).
  torch::Tensor nonfinite_gradients() const;
  // The parameters' gradients (undefined where a parameter has none), in the parameters' order.
  std::vector<torch::Tensor> gradients() const;
  // Its state given the parameters' names: momentum_buffer/<name> (SGD, LARS); exp_avg/<name>,
  // exp_avg_sq/<name> and steps (AdamW).
  std::vector<std::pair<std::string, torch::Tensor>> state(const std::vector<std::string>& names) const;

 private:
  std::optional<Lars> lars_;
  std::optional<AdamW> adamw_;
  std::optional<MomentumSgd> sgd_;
};

}  // namespace moco::optim
