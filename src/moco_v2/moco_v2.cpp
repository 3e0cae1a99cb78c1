#include "moco_v2/moco_v2.h"

#include "model/positive_rank.h"
#include "moco_v2/v2_settings.h"
#include "run/device.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

namespace moco::moco_v2 {
namespace {

moco_v2::Moco make_moco(const run::Config& config, const run::RunContext& context, int64_t in_channels) {
  const Settings& s = settings(config);
  const MocoOptions options{s.queue_size,
                            s.momentum,
                            s.temperature,
                            /*skip_nonfinite=*/true,
                            /*bf16=*/config.train.precision == run::Precision::kBf16,
                            /*shuffle_at_world_one=*/config.dist.world_group_at_one};
  const auto encoder = encoder_options(config, in_channels, context.group->world_size());
  moco_v2::Moco moco(encoder, options, context.group, config.train.seed);
  moco->to(context.device);
  if (config.train.channels_last) run::use_channels_last(*moco);
  if (context.device.is_cuda()) at::globalContext().setBenchmarkCuDNN(config.train.cudnn_benchmark);
  moco->train();
  return moco;
}

std::vector<std::string> query_parameter_names(moco_v2::MocoImpl& moco) {
  std::vector<std::string> names;
  for (const auto& item : moco.encoder_q->named_parameters()) names.push_back("encoder_q." + item.key());
  return names;
}

// Rank 0's state everywhere (replicas.broadcast_start), then the line that says what was built.
moco_v2::Moco& started(moco_v2::Moco& moco, ReplicaSync& replicas, const run::Config& c, const run::RunContext& ctx) {
  replicas.broadcast_start();
  spdlog::info(
      "{}: {} parameters in the query encoder, feature dim {}, queue {}x{}, {} rank(s) on {}, {} threads, {}{}",
      c.model.arch, model::count_parameters(*moco->encoder_q), moco->encoder_q->feature_dim(), c.model.dim,
      settings(c).queue_size, ctx.group->world_size(), ctx.device.str(), torch::get_num_threads(), c.train.precision,
      c.train.channels_last ? ", channels-last" : "");
  return moco;
}

}  // namespace

model::ResNetOptions encoder_options(const run::Config& c, int64_t in_channels, int world_size) {
  auto options = run::backbone_options(c, in_channels);
  options.mlp_head = settings(c).mlp;
  options.bn_splits = bn_splits_per_rank(c, world_size);
  return options;
}

// The math is then the same for any world size that divides moco.bn_splits (a checkpoint resumes on
// another number of ranks exactly); with more ranks than groups, each rank's batch is one group, as
// in the reference.
int64_t bn_splits_per_rank(const run::Config& c, int world_size) {
  const int64_t splits = settings(c).bn_splits;
  if (splits <= world_size) return 1;
  if (splits % world_size != 0) {
    spdlog::warn(
        "moco.bn_splits {} is not a multiple of the {} ranks: each rank normalises its batch as one BatchNorm group",
        splits, world_size);
    return 1;
  }
  return splits / world_size;
}

MocoV2::MocoV2(const run::Config& c, const run::RunContext& ctx, int64_t in_channels)
    : MomentumMethod(c, ctx),
      moco_(make_moco(c, ctx, in_channels)),
      replicas_(c, *moco_, *ctx.group),
      optimizer_(started(moco_, replicas_, c, ctx)->trainable_parameters(), c.optim.momentum, c.optim.weight_decay),
      debug_(settings(c).check_invariants, c.debug.anomaly_detection, *moco_) {
  average_gradients(moco_->trainable_parameters(), query_parameter_names(*moco_));
  if (c.optim.micro_batch > 0)
    spdlog::info(
        "optim.micro_batch {}: each rank's share in pieces of {} images, each with its own BatchNorm statistics "
        "and shuffle-BN, as a smaller batch per rank would have; the queue takes the step's keys once, after the "
        "last piece",
        c.optim.micro_batch, c.optim.micro_batch);
}

// Algorithm 1 of the MoCo paper on this rank's share of the batch (with optim.micro_batch, in
// pieces): the two augmented views, the query encoder's forward, the key encoder's momentum update
// and forward (shuffled keys) and the logits against the queue (moco_v2::Moco's forward), the backward, the gradients
// averaged across ranks, the enqueue (moco_v2::Moco's end_step) and the SGD update. Where any rank's queries, keys,
// loss or gradients hold NaN or Inf, every rank keeps its state instead, decided on the device
// (Note [Skipping a step on the device]).
run::StepOutput MocoV2::step(const data::TwoViewBatch& batch, int64_t step) {
  replicas_.before_step(step);
  debug_.before_forward();
  const auto x_q = spoiled_view(run::to_device(batch.query, context_.device, config_.train.channels_last), step,
                                sys::NanTarget::kQueries);
  const auto x_k = spoiled_view(run::to_device(batch.key, context_.device, config_.train.channels_last), step,
                                sys::NanTarget::kKeys);
  const int64_t piece = config_.optim.micro_batch;
  MocoOutput out;
  if (piece > 0 && piece < x_q.size(0)) {
    optimizer_.zero_grad();
    out = forward_backward_in_pieces(x_q, x_k, step);
  } else {
    out = moco_->forward(x_q, x_k);
    spoil_loss_and_gradients(out.loss, out.q, step);
    optimizer_.zero_grad();
    out.loss.backward();
  }
  // This rank's own gradients, before they are averaged: the flag then names the rank they came from.
  const auto gradients_nonfinite = optimizer_.nonfinite_gradients();
  finish_gradients();
  moco_->end_step(out, gradients_nonfinite);
  debug_.after_forward(step, out.trained);
  optimizer_.step(out.trained);
  debug_.after_step(step);
  return {out.loss,      accuracies(out.positive_rank), out.nonfinite_by_rank,
          out.trained,   moco_->last_shuffle_bytes(),   gradient_bytes(),
          out.q_features};
}

// optim.micro_batch (MocoImpl::forward_backward_in_pieces): the reducer holds the averaging until the
// last piece's backward.
MocoOutput MocoV2::forward_backward_in_pieces(const torch::Tensor& x_q, const torch::Tensor& x_k, int64_t step) {
  run::PieceHooks<MocoOutput> hooks;
  hooks.loss_to_backward = [&](MocoOutput& piece) {
    spoil_loss_and_gradients(piece.loss, piece.q, step);
    return piece.loss;
  };
  hooks.before_first_backward = [this] { accumulate_gradients_locally(true); };
  hooks.before_last_backward = [this] { accumulate_gradients_locally(false); };
  return moco_->forward_backward_in_pieces(x_q, x_k, config_.optim.micro_batch, hooks);
}

// Names follow torchvision's state_dict keys under one group per module (docs/checkpoints.md):
// encoder_q/<key> and encoder_k/<key>, moco/queue and moco/queue_ptr, optimizer/momentum_buffer/<key>.
// BatchNorm buffers are rank-local when no step broadcasts rank 0's.
std::vector<ckpt::StateEntry> state_entries(moco_v2::MocoImpl& moco, const optim::MomentumSgd& sgd,
                                            bool bn_rank_local) {
  std::vector<ckpt::StateEntry> entries;
  run::add_module_entries(entries, run::kQueryEncoderGroup, *moco.encoder_q, bn_rank_local);
  run::add_module_entries(entries, run::kMomentumEncoderGroup, *moco.encoder_k, bn_rank_local);
  const auto queue = moco.queue_state();
  entries.push_back({"moco/queue", queue[0]});
  entries.push_back({"moco/queue_ptr", queue[1]});
  const auto names = moco.encoder_q->named_parameters();
  const auto& buffers = sgd.momentum_buffers();
  for (size_t i = 0; i < buffers.size(); ++i)
    entries.push_back({std::string(run::kOptimizerGroup) + "momentum_buffer/" + names[i].key(), buffers[i]});
  return entries;
}

run::MethodFacts MocoV2::facts() {
  return {model::count_parameters(*moco_->encoder_q),
          fmt::format("queue {}, BatchNorm groups per rank {}", settings(config_).queue_size,
                      bn_splits_per_rank(config_, context_.group->world_size()))};
}

}  // namespace moco::moco_v2
