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
  void step();
  // Its state given the parameters' names: momentum_buffer/<name> (SGD, LARS); exp_avg/<name>,
  // exp_avg_sq/<name> and steps (AdamW).
  std::vector<std::pair<std::string, torch::Tensor>> state(const std::vector<std::string>& names) const;

 private:
  std::optional<Lars> lars_;
  std::optional<AdamW> adamw_;
  std::optional<MomentumSgd> sgd_;
};

}  // namespace moco::optim
