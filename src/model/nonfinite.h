// defines: holds_nonfinite (whether a tensor holds NaN or Inf, decided on its device in one
// reduction), what the step's skip (Note [Skipping a step on the device]) checks its values with
#pragma once

#include <torch/types.h>

namespace moco::model {

// A bool scalar on t's device: true where some element of t is NaN or +-Inf (false for an empty t).
// One aminmax over t and a few ops on its two results: isfinite(t).all() would write several
// full-size temporaries (isfinite is a composite of abs, eq, ne and mul) and launch more kernels.
torch::Tensor holds_nonfinite(const torch::Tensor& t);

}  // namespace moco::model
