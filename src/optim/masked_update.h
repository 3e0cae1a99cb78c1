// defines: keep_where (an optimizer's new value kept where a step is applied), what a step skipped on
// the device (Note [Skipping a step on the device]) writes its state with
#pragma once

#include <torch/torch.h>

namespace moco::optim {

// target = value where `apply` (a bool scalar on target's device), else target unchanged; all of it
// where `apply` is undefined. Bit for bit `value` where applied: the update's own kernels made it out
// of place, and torch::where copies it.
inline void keep_where(torch::Tensor target, const torch::Tensor& value, const torch::Tensor& apply) {
  if (apply.defined())
    torch::where_out(target, apply, value, target);
  else
    target.copy_(value);
}

}  // namespace moco::optim
