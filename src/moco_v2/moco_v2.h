// defines: MocoV2, MoCo v1 and v2 as a run::MomentumMethod: the query and momentum key encoders with
// the queue and shuffle-BN (moco_v2/moco.h), SGD with momentum, rank 0's BatchNorm buffers for every
// rank, and the debug mode's invariants
#pragma once

#include "dist/process_group.h"
#include "moco_v2/moco.h"
#include "moco_v2/invariants.h"
#include "moco_v2/replicas.h"
#include "optim/sgd.h"
#include "run/config.h"
#include "run/momentum_method.h"
#include "run/run_context.h"

#include <cstdint>
#include <vector>

namespace moco::moco_v2 {

// moco.bn_splits counts BatchNorm groups in the global batch; the groups of one rank's share.
int64_t bn_splits_per_rank(const run::Config& config, int world_size);

// The encoders' options: model.*'s ResNet with model.mlp's head and a rank's BatchNorm groups.
model::ResNetOptions encoder_options(const run::Config& config, int64_t in_channels, int world_size);

// The named tensors of a MoCo v1/v2 checkpoint, in the order they are saved.
std::vector<ckpt::StateEntry> state_entries(moco_v2::MocoImpl& moco, const optim::MomentumSgd& sgd, bool bn_rank_local);

class MocoV2 final : public run::MomentumMethod {
 public:
  // Builds the model (its initialisation draws from train.seed), makes every rank start from rank
  // 0's, and logs what it built. Collective.
  MocoV2(const run::Config& config, const run::RunContext& context, int64_t in_channels);

  void set_lr(double lr) override { optimizer_.set_lr(lr); }
  run::StepOutput step(const data::TwoViewBatch& batch, int64_t step) override;
  void check_after_step(int64_t step) override { replicas_.check_after_step(step); }
  std::vector<ckpt::StateEntry> state_entries() override {
    return moco_v2::state_entries(*moco_, optimizer_, replicas_.bn_rank_local());
  }
  int64_t draw_counter() const override { return moco_->shuffle_steps(); }
  void set_draw_counter(int64_t draws) override { moco_->set_shuffle_steps(draws); }
  void before_save() override { replicas_.broadcast_bn_for_save(); }
  void before_eval() override { replicas_.broadcast_bn_for_eval(); }
  model::Backbone encoder() override { return moco_->encoder_q; }
  run::MethodFacts facts() override;

 private:
  MocoOutput forward_backward_in_pieces(const torch::Tensor& x_q, const torch::Tensor& x_k, int64_t step);

  moco_v2::Moco moco_;
  ReplicaSync replicas_;
  optim::MomentumSgd optimizer_;
  DebugChecks debug_;
};

}  // namespace moco::moco_v2
