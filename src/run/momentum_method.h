// defines: MomentumMethod, what every momentum method (a query encoder trained by its loss, a momentum
// encoder following it: MoCo v1/v2, v3) does the same way behind the loop's seam, written once as
// solo-learn's BaseMomentumMethod: the gradients averaged across ranks, the fault hook, the
// checkpoint's module groups, the accuracy report. The on-device skip with its agreement across
// ranks is model/nonfinite.h's, the momentum update model/momentum_update.h's.
#pragma once

#include "ckpt/checkpoint.h"
#include "dist/reducer.h"
#include "run/config.h"
#include "run/method.h"
#include "run/run_context.h"
#include "sys/fault_hooks.h"

#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::run {

// The checkpoint groups of a momentum method's two encoders and its optimizer's state
// (docs/checkpoints.md): the query encoder's group is the one evaluation reads.
inline constexpr const char* kQueryEncoderGroup = "encoder_q/";
inline constexpr const char* kMomentumEncoderGroup = "encoder_k/";
inline constexpr const char* kOptimizerGroup = "optimizer/";

// A module's parameters, then its buffers (rank-local where each rank keeps its own), as checkpoint
// entries named "<group><state_dict key>".
void add_module_entries(std::vector<ckpt::StateEntry>& entries, const std::string& group, torch::nn::Module& module,
                        bool buffers_rank_local = false);

class MomentumMethod : public Method {
 public:
  // The contrastive task's accuracies: how often a query's own key outscores every negative (acc@1),
  // all but four (acc@5); StepOutput::scalars from accuracies().
  std::vector<StepScalar> step_scalars() const override;

 protected:
  MomentumMethod(const Config& config, const RunContext& context);

  // From the method's constructor, once its model is on the device and agreed across ranks: the
  // gradients of `parameters` (`names` for errors) are averaged across ranks in buckets during the
  // backward (DDP's reducer), also at a world of one that rehearses world N (dist.world_group_at_one).
  void average_gradients(std::vector<torch::Tensor> parameters, std::vector<std::string> names);
  // After the backward: the last buckets' averages waited for (on the device's stream).
  void finish_gradients() { reducer_->finalize(); }
  // A step of several backward passes (optim.micro_batch): on before the first, off before the last,
  // which averages the step's sum once (dist::GradientReducer::accumulate_locally).
  void accumulate_gradients_locally(bool on) { reducer_->accumulate_locally(on); }
  int64_t gradient_bytes() const { return reducer_->last_stats().bytes_reduced; }

  // MOCO_INJECT_NAN (sys/fault_hooks.h) at this step on this rank: the views each encoder sees
  // (all NaN), the loss (NaN added: its gradient stays finite), the gradient reaching `queries` (the
  // loss stays finite).
  torch::Tensor spoiled_view(const torch::Tensor& x, int64_t step, sys::NanTarget encoder) const;
  void spoil_loss_and_gradients(torch::Tensor& loss, const torch::Tensor& queries, int64_t step) const;

  // acc@1 and acc@5 (%) of the step's positive ranks, float64 on the device (step_scalars' order).
  static torch::Tensor accuracies(const torch::Tensor& positive_rank);

  const Config& config_;
  const RunContext& context_;

 private:
  std::optional<dist::GradientReducer> reducer_;
  sys::NanInjection nan_;
};

}  // namespace moco::run
