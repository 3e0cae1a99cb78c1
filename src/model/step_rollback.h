// defines: StepRollback (what a momentum method's step changes before it can be known to be finite,
// copied on the device and put back where the step is skipped): the state half of Note [Skipping a
// step on the device], which every momentum method shares
#pragma once

#include "model/flat_tensors.h"

#include <torch/types.h>

#include <vector>

namespace moco::model {

// A step changes state before anyone can know it went non-finite: every BatchNorm's running
// statistics in the forward, and the momentum encoder's parameters in the momentum update. So the
// step starts with a copy of them, on the device, and once the flag is known (after the backward)
// they keep their new values or get the copy back: one torch::where per flat buffer (Note [Flat
// buffers]), bit for bit the new value where kept. The trained parameters change only in the
// optimizer's step, which takes the flag itself (optim::Optimizer::step).
class StepRollback {
 public:
  // `momentum_parameters`: the flat buffer the momentum update writes; `buffers`: every BatchNorm
  // buffer, one flat buffer per dtype. The method owns both; they outlive this.
  StepRollback(FlatTensors& momentum_parameters, std::vector<FlatTensors>& buffers)
      : momentum_parameters_(&momentum_parameters), buffers_(&buffers) {}
  // Before the step's forward.
  void snapshot();
  // After the flag is known: the snapshot's values back where `keep_new` (a bool scalar on the
  // device) is false. No host read.
  void restore_unless(const torch::Tensor& keep_new);

 private:
  FlatTensors* momentum_parameters_;
  std::vector<FlatTensors>* buffers_;
  torch::Tensor momentum_parameters_before_;
  std::vector<torch::Tensor> buffers_before_;
};

}  // namespace moco::model
