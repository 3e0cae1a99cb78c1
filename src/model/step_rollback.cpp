#include "model/step_rollback.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::model {

void StepRollback::snapshot() {
  RECORD_USER_SCOPE("update/skip_snapshot");  // Note [Update scopes] (sys/op_count.h)
  torch::NoGradGuard no_grad;
  momentum_parameters_before_ = momentum_parameters_->flat().clone();
  buffers_before_.clear();
  for (auto& kind : *buffers_) buffers_before_.push_back(kind.flat().clone());
}

// BatchNorm's forward saves its running statistics for backward (used there only in eval mode), so
// they are written through the flat buffer, which has a version counter of its own, without bumping
// theirs: a bump would fail a backward that comes after this (v2 may restore before its backward).
void StepRollback::restore_unless(const torch::Tensor& keep_new) {
  RECORD_USER_SCOPE("update/skip_restore");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_->size(); ++i) {
    auto values = (*buffers_)[i].flat();
    torch::where_out(values, keep_new, values, buffers_before_[i]);
  }
  auto momentum = momentum_parameters_->flat();
  torch::where_out(momentum, keep_new, momentum, momentum_parameters_before_);
  momentum_parameters_->bump_versions();
}

}  // namespace moco::model
