// defines: holds_nonfinite (whether a tensor holds NaN or Inf, decided on its device in one
// reduction), what the step's skip (Note [Skipping a step on the device]) checks its values with;
// NonfiniteCause (what held them), nonfinite_causes (a rank's bits) and nonfinite_causes_text;
// StepAgreement and agree_on_step (every rank's bits, and whether the step trains)
#pragma once

#include "dist/process_group.h"

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

// This rank's NonfiniteCause bits, an int32 scalar on the device: the queries, the keys, the loss and
// `gradients_nonfinite` (a bool scalar: this rank's gradients before they are averaged, so that the
// flag names the rank they came from; undefined where they are no cause: with a loss scale an Inf
// gradient is the scale's to skip).
torch::Tensor nonfinite_causes(const std::vector<torch::Tensor>& queries, const std::vector<torch::Tensor>& keys,
                               const torch::Tensor& loss, const torch::Tensor& gradients_nonfinite);

// What every rank knows of a step once the ranks' bits are gathered (Note [Skipping a step on the
// device]): nonfinite_by_rank [world] int32, and trained, a bool scalar, true where no rank had any.
struct StepAgreement {
  torch::Tensor nonfinite_by_rank;
  torch::Tensor trained;
};
// Collective, on the device: one all-gather of each rank's bits, no host read.
StepAgreement agree_on_step(const torch::Tensor& local_causes, dist::ProcessGroup& group);

}  // namespace moco::model
