// defines: InvariantChecker, the debug mode's per-step proof that MoCo's state is what it must be:
// the key encoder moved by exactly k = m*k + (1-m)*q and received no gradient; the queue holds unit
// keys and no autograd graph; DebugChecks (the debug.* switches as the training step's hooks)
#pragma once

#include "moco_v2/moco.h"
#include "run/config.h"

#include <optional>
#include <vector>

namespace moco::moco_v2 {

class InvariantChecker {
 public:
  explicit InvariantChecker(moco_v2::MocoImpl& moco) : moco_(moco) {}
  // Before the step's forward: remembers both encoders' parameters.
  void before_forward();
  // After the forward and Moco::end_step (the momentum update and the enqueue, kept or not) and
  // before the optimizer step. Throws std::logic_error naming the step and the tensor.
  // `trained`: MocoOutput::trained (undefined: the step trained). A skipped step is not checked (it
  // reads the flag on the host: debug runs only).
  void after_forward(int64_t step, const torch::Tensor& trained = {}) const;
  // After the optimizer step: still no gradient in the key encoder.
  void after_step(int64_t step) const;

 private:
  moco_v2::MocoImpl& moco_;
  std::vector<torch::Tensor> q_before_, k_before_;
};

// debug.check_invariants (an InvariantChecker around every step) and debug.anomaly_detection
// (autograd's, switched on here); both logged in one line. Each hook is a no-op when its switch is off.
class DebugChecks {
 public:
  DebugChecks(bool check_invariants, bool anomaly_detection, moco_v2::MocoImpl& moco);
  void before_forward() {
    if (invariants_) invariants_->before_forward();
  }
  void after_forward(int64_t step, const torch::Tensor& trained) const {
    if (invariants_) invariants_->after_forward(step, trained);
  }
  void after_step(int64_t step) const {
    if (invariants_) invariants_->after_step(step);
  }

 private:
  std::optional<InvariantChecker> invariants_;
};

}  // namespace moco::moco_v2
