// defines: MocoV3, MoCo v3 behind the training loop's seam (run/method.h): the model of v3_model.h,
// LARS, AdamW or SGD, DDP-style gradient averaging, the momentum's schedule over the run; v3_state_entries,
// v3_options
#pragma once

#include "dist/reducer.h"
#include "moco_v3/adamw.h"
#include "moco_v3/lars.h"
#include "moco_v3/v3_model.h"
#include "run/config.h"
#include "run/method.h"
#include "run/run_context.h"
#include "run/sgd.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::moco_v3 {

// The optimizer optim.optimizer names: LARS, AdamW or SGD with momentum (run::MomentumSgd).
class Optimizer {
 public:
  Optimizer(const run::Config& config, std::vector<torch::Tensor> parameters);
  void set_lr(double lr);
  void zero_grad();
  void step();
  // Its state for a checkpoint, given the parameters' names: optimizer/momentum_buffer/<name> (SGD,
  // LARS); optimizer/exp_avg/<name>, optimizer/exp_avg_sq/<name> and optimizer/steps (AdamW).
  std::vector<ckpt::StateEntry> state_entries(const std::vector<std::string>& names) const;

 private:
  std::optional<Lars> lars_;
  std::optional<AdamW> adamw_;
  std::optional<run::MomentumSgd> sgd_;
};

// The named tensors of a MoCo v3 checkpoint: encoder_q/<key>, encoder_k/<key>, predictor/<key> (the
// official state_dict's keys below its module names) and the optimizer's (Optimizer::state_entries).
std::vector<ckpt::StateEntry> v3_state_entries(MocoV3ModelImpl& model, const Optimizer& optimizer);

// The model's options from the config (model.dim, v3.*, train.precision).
V3Options v3_options(const run::Config& config);

class MocoV3 final : public run::Method {
 public:
  // Builds the model (its initialisation draws from the global generator, seeded from train.seed)
  // and makes every rank start from rank 0's. Collective.
  MocoV3(const run::Config& config, const run::RunContext& context, int64_t in_channels);
  // The same with the model's options given: v3_options(config) with changes no config key makes
  // (predictor_last_bn, for the tools and tests that build the official ViT model).
  MocoV3(const run::Config& config, const run::RunContext& context, int64_t in_channels, const V3Options& options);

  void set_run_length(int64_t total_steps) override { total_steps_ = total_steps; }
  void set_lr(double lr) override { optimizer_.set_lr(lr); }
  run::StepOutput step(const data::TwoViewBatch& batch, int64_t step) override;
  void check_after_step(int64_t) override {}
  std::vector<ckpt::StateEntry> state_entries() override { return v3_state_entries(*model_, optimizer_); }
  int64_t draw_counter() const override { return 0; }  // v3 draws nothing while it trains
  void set_draw_counter(int64_t) override {}
  void before_save() override { agree_on_buffers(); }
  void before_eval() override { agree_on_buffers(); }
  model::Backbone encoder() override { return model_->encoder_q; }
  run::MethodFacts facts() override;

  // The momentum m of step `step` (counted from 1): progress (step - 1) / total steps.
  double momentum_for_step(int64_t step) const;
  MocoV3Model& model() { return model_; }

 private:
  // BN running statistics move by global statistics (SyncBN) and so agree already; rank 0's are
  // given to every rank anyway, so that a checkpoint and an evaluation see one model bit for bit.
  void agree_on_buffers();

  const run::Config& config_;
  const run::RunContext& context_;
  MocoV3Model model_;
  Optimizer optimizer_;
  dist::GradientReducer reducer_;
  int64_t total_steps_ = 1;
};

}  // namespace moco::moco_v3
