// defines: holds_nonfinite (whether a tensor holds NaN or Inf, decided on its device in one
// reduction), what the step's skip (Note [Skipping a step on the device]) checks its values with;
// NonfiniteCause (what held them) and nonfinite_causes_text
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moco::model {

// A bool scalar on t's device: true where some element of t is NaN or +-Inf (false for an empty t).
// One aminmax over t and a few ops on its two results: isfinite(t).all() would write several
// full-size temporaries (isfinite is a composite of abs, eq, ne and mul) and launch more kernels.
torch::Tensor holds_nonfinite(const torch::Tensor& t);
// The same over every defined tensor of `tensors` (false where none is defined or all are empty), on
// the first one's device: one aminmax per tensor and a few ops on their results together, not a
// holds_nonfinite each (a tensor-by-tensor optimizer's gradients: hundreds of tensors).
torch::Tensor holds_nonfinite(const std::vector<torch::Tensor>& tensors);

// What held NaN or Inf on a rank: the bits a method's skip check sets (run::StepOutput::nonfinite_by_rank).
enum NonfiniteCause : int32_t {
  kNonfiniteQueries = 1,
  kNonfiniteKeys = 2,
  kNonfiniteLoss = 4,
  kNonfiniteGradients = 8,
};
// The causes set in `causes`, e.g. "queries, loss, gradients".
std::string nonfinite_causes_text(int32_t causes);

}  // namespace moco::model
