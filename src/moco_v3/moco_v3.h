// defines: MocoV3, MoCo v3 as a run::MomentumMethod: the model of v3_model.h, LARS, AdamW or SGD, the
// momentum's schedule over the run, the step's rollback where it is skipped and fp16's loss scale; StepPrecision and
// step_precision; v3_state_entries; scheduled_momentum
#pragma once

#include "model/grad_scaler.h"
#include "model/step_rollback.h"
#include "moco_v3/v3_model.h"
#include "moco_v3/v3_settings.h"
#include "optim/optimizer.h"
#include "run/config.h"
#include "run/momentum_method.h"
#include "run/run_context.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::moco_v3 {

// The named tensors of a MoCo v3 checkpoint: encoder_q/<key>, encoder_k/<key>, predictor/<key> (the
// official state_dict's keys below its module names), the optimizer's (Optimizer::state) and, with a
// loss scale, scaler/scale and scaler/growth_tracker (main_moco.py saves its GradScaler's).
std::vector<ckpt::StateEntry> v3_state_entries(MocoV3ModelImpl& model, const optim::Optimizer& optimizer,
                                               const model::GradScaler* scaler = nullptr);

// How a step computes: the autocast dtype of the encoders and heads (kFloat: none) and, for fp16, the
// dynamic loss scale (torch.cuda.amp.GradScaler's defaults, as main_moco.py runs it). Apart, so that a
// test on a CPU, whose autocast has no float16, can scale the loss of an fp32 step: fp16's step but
// for the casts.
// The momentum m at progress p of the run, as v3.momentum_schedule says (cosine: momentum_at).
double scheduled_momentum(const Settings& s, double progress);

struct StepPrecision {
  torch::Dtype autocast = torch::kFloat;
  std::optional<model::GradScalerOptions> loss_scale;
};
// train.precision's: fp32 none; bf16 bfloat16 autocast; fp16 float16 autocast and the loss scale.
StepPrecision step_precision(const run::Config& config);

// model.arch's backbone as v3 builds its encoders (a ViT's patch projection frozen with v3.stop_grad_conv1).
model::Backbone v3_backbone(const run::Config& config, int64_t in_channels);

class MocoV3 final : public run::MomentumMethod {
 public:
  // Builds the model (its initialisation draws from the global generator, seeded from train.seed)
  // and makes every rank start from rank 0's. Collective.
  MocoV3(const run::Config& config, const run::RunContext& context, int64_t in_channels)
      : MocoV3(config, context, in_channels, step_precision(config)) {}
  MocoV3(const run::Config& config, const run::RunContext& context, int64_t in_channels,
         const StepPrecision& precision);

  void set_run_length(int64_t total_steps) override { total_steps_ = total_steps; }
  void set_lr(double lr) override { optimizer_.set_lr(lr); }
  run::StepOutput step(const data::TwoViewBatch& batch, int64_t step) override;
  std::vector<ckpt::StateEntry> state_entries() override {
    return v3_state_entries(*model_, optimizer_, scaler_ ? &*scaler_ : nullptr);
  }
  void before_save() override { agree_on_buffers(); }
  void before_eval() override { agree_on_buffers(); }
  model::Backbone encoder() override { return model_->encoder_q; }
  run::MethodFacts facts() override;

  // The momentum m of step `step` (counted from 1): progress (step - 1) / total steps.
  // (scheduled_momentum: v3.momentum_schedule's.)
  double momentum_for_step(int64_t step) const;
  MocoV3Model& model() { return model_; }
  // The loss scale's state (fp16), or null.
  const model::GradScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }

 private:
  // BN running statistics move by global statistics (SyncBN) and so agree already; rank 0's are
  // given to every rank anyway, so that a checkpoint and an evaluation see one model bit for bit.
  void agree_on_buffers();
  // The views each encoder sees, the loss and the queries' gradient, spoiled where MOCO_INJECT_NAN
  // hits this step and rank.
  V3Output forward(const data::TwoViewBatch& batch, int64_t step);
  // optim.micro_batch's forward and backward (MocoV3ModelImpl::forward_backward_in_pieces): the
  // reducer holds the averaging until the last piece's backward.
  V3Output forward_backward_in_pieces(const data::TwoViewBatch& batch, int64_t step);
  // After the backward: every rank's NonfiniteCause bits into `result` (nonfinite_by_rank, trained),
  // the rollback where not trained, then the update (the loss scale's unscale, skip and update first).
  void finish_step(const V3Output& out, run::StepOutput& result);

  MocoV3Model model_;
  optim::Optimizer optimizer_;
  // What a skipped step puts back (model::StepRollback): the momentum encoder's parameters, and every
  // BatchNorm buffer of both encoders, their projectors and the predictor.
  model::FlatTensors momentum_parameters_;
  std::vector<model::FlatTensors> buffers_;
  model::StepRollback rollback_;
  std::optional<model::GradScaler> scaler_;
  int64_t total_steps_ = 1;
};

}  // namespace moco::moco_v3
