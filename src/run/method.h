// defines: StepScalar (a number a method reports each step, and how the loop shows it), StepOutput
// (what one training step reports to the loop), Method (the seam between the training loop and a
// method: what a step computes, what a checkpoint keeps of it, what the run logs and evaluates).
// Each method's room (run/method_room.h) puts one behind it.
#pragma once

#include "ckpt/checkpoint.h"
#include "data/loader.h"
#include "model/backbone.h"

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moco::run {

// One number a method reports every step besides its loss. The loop averages it over the ranks and
// over the steps of a log interval, and writes it to metrics.jsonl (field `name`), to TensorBoard
// (train/<name>) and into the step's line (" <label> <value><unit>", `decimals` after the point).
struct StepScalar {
  std::string name;   // "acc1"
  std::string label;  // "acc@1"
  std::string unit;   // "%"
  int decimals = 1;
  bool in_epoch_line = false;  // also in the line that closes an epoch
};

// Tensors stay on the device: the loop reads them in batches, where the host waits anyway
// (Note [The step's agreement does not block the step]).
struct StepOutput {
  torch::Tensor loss;     // scalar
  torch::Tensor scalars;  // float64 [Method::step_scalars().size()]: this rank's values, in that order
  // Both undefined when the method never skips: nonfinite_by_rank [world] int32, 1 where that rank's
  // inputs to the update were not finite; trained, a bool scalar, false when the step changed nothing.
  torch::Tensor nonfinite_by_rank;
  torch::Tensor trained;
  int64_t exchanged_bytes = 0;  // this rank sent to other ranks in the forward (MoCo v1/v2: shuffle-BN)
  int64_t gradient_bytes = 0;   // averaged across the ranks in the backward
  torch::Tensor features;       // [n, d] the query view's pooled backbone features, no graph (eval.online_probe)
};

// What the run's plan and log say of a method.
struct MethodFacts {
  int64_t parameters = 0;  // trained ones
  std::string plan;        // the rest of the dry run's model line: "queue 65536, BatchNorm groups per rank 1"
};

// One method's model, optimizer and step. The loop owns the data, the schedule, the checkpoint
// cadence and the logs; it calls these in this order each step: set_lr, step, check_after_step. A
// method states its step, its checkpoint's tensors and its encoder; the rest has a default that is
// right for a method without it (nothing drawn, nothing rank-local, no checks, no scalars), so no
// method writes an empty function. MomentumMethod (run/momentum_method.h) is what momentum methods share.
class Method {
 public:
  virtual ~Method() = default;
  virtual void set_lr(double lr) = 0;
  // One optimisation step (counted from 1) on this rank's share of the global batch: both views'
  // forward, the loss, the backward, the gradients averaged across ranks, the update. Collective;
  // never waits for the device.
  virtual StepOutput step(const data::TwoViewBatch& batch, int64_t step) = 0;
  // The named tensors a checkpoint holds of the method (weights, optimizer state, queues), the same
  // tensors every call; a save reads them and a resume restores into them.
  virtual std::vector<ckpt::StateEntry> state_entries() = 0;
  // The encoder whose backbone the kNN monitor judges.
  virtual model::Backbone encoder() = 0;

  // The steps the whole run takes (train.epochs), once, before the first step: for a method whose
  // schedule follows the run's progress (MoCo v3's momentum).
  virtual void set_run_length(int64_t /*total_steps*/) {}
  // After step `step`: the method's own consistency checks across ranks (collective; may throw).
  virtual void check_after_step(int64_t /*step*/) {}
  // Random draws made so far that a resumed run must continue from (progress/shuffle_steps).
  virtual int64_t draw_counter() const { return 0; }
  virtual void set_draw_counter(int64_t /*draws*/) {}
  // Brings what is rank-local to agreement before a save (collective).
  virtual void before_save() {}
  // Brings the statistics evaluation uses to agreement across ranks (collective).
  virtual void before_eval() {}
  // What StepOutput::scalars holds, the same every step.
  virtual std::vector<StepScalar> step_scalars() const { return {}; }
  virtual MethodFacts facts() { return {}; }
};

}  // namespace moco::run
