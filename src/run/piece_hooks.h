// defines: PieceHooks, what a method's step in pieces (optim.micro_batch) lets its caller do around
// the backward passes: the loss each backward takes (a loss scale, a fault hook), and calls before the
// first and before the last (the reducer's local accumulation on, then off)
#pragma once

#include <torch/types.h>

#include <functional>

namespace moco::run {

// Each optional. `Output` is the method's forward output, whose loss the first hook may spoil or scale.
template <typename Output>
struct PieceHooks {
  std::function<torch::Tensor(Output&)> loss_to_backward;
  std::function<void()> before_first_backward, before_last_backward;
};

}  // namespace moco::run
