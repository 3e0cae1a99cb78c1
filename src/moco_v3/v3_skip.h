// defines: StepRollback (what a MoCo v3 step changes before its update, copied on the device and put
// back where the step is skipped): v3's half of Note [Skipping a step on the device]
#pragma once

#include "model/flat_tensors.h"
#include "moco_v3/v3_model.h"

#include <torch/types.h>

#include <vector>

namespace moco::moco_v3 {

// A v3 step changes state before anyone can know it went non-finite: every BatchNorm's running
// statistics (both encoders, projectors and predictor) in the forward, and the momentum encoder's
// parameters in the momentum update, which comes before the keys as in the official forward. So
// the step starts with a copy of them, on the device, and once the flag is known (after the
// backward) they keep their new values or get the copy back: one torch::where per flat buffer (the
// tensors are bound into flat buffers, Note [Flat buffers]), bit for bit the new value where kept.
// The query encoder and the predictor's parameters change only in the optimizer's step, which takes
// the flag itself (optim::Optimizer::step).
class StepRollback {
 public:
  explicit StepRollback(MocoV3ModelImpl& model);
  // Before the step's forward.
  void snapshot();
  // After the backward: the snapshot's values back where `keep_new` (a bool scalar on the device) is
  // false. No host read.
  void restore_unless(const torch::Tensor& keep_new);

 private:
  model::FlatTensors momentum_parameters_;
  std::vector<model::FlatTensors> buffers_;  // one per dtype: float statistics, int64 counts
  torch::Tensor momentum_parameters_before_;
  std::vector<torch::Tensor> buffers_before_;
};

}  // namespace moco::moco_v3
