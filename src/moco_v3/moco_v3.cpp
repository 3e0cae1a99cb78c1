#include "moco_v3/moco_v3.h"

#include "model/nonfinite.h"
#include "model/sync_batchnorm.h"
#include "moco_v3/v3_settings.h"
#include "run/device.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace moco::moco_v3 {
namespace {

V3Options v3_options(const run::Config& c, const StepPrecision& precision) {
  const Settings& s = settings(c);
  V3Options options{c.model.dim, s.mlp_dim, s.projector_layers, s.predictor_layers, s.temperature, precision.autocast};
  options.predictor_last_bn = s.predictor_last_bn;
  return options;
}

}  // namespace

StepPrecision step_precision(const run::Config& c) {
  StepPrecision p;
  if (c.train.precision == run::Precision::kBf16) p.autocast = torch::kBFloat16;
  if (c.train.precision == run::Precision::kFp16) {
    p.autocast = torch::kHalf;
    p.loss_scale = model::GradScalerOptions{};
  }
  return p;
}

model::Backbone v3_backbone(const run::Config& c, int64_t in_channels) {
  if (!run::is_vit(c.model.arch)) return run::make_backbone(c, in_channels);
  auto options = run::vit_options(c, in_channels);
  options.stop_grad_conv1 = settings(c).stop_grad_conv1;
  return model::VisionTransformer(options);
}

namespace {

std::vector<torch::Tensor> parameters_and_buffers(torch::nn::Module& module) {
  auto tensors = module.parameters();
  for (const auto& b : module.buffers()) tensors.push_back(b);
  return tensors;
}

std::string describe(const StepPrecision& p) {
  const char* scaled = p.loss_scale ? " with a dynamic loss scale" : "";
  if (p.autocast == torch::kFloat) return fmt::format("fp32{}", scaled);
  return fmt::format("{} autocast{}", p.autocast == torch::kHalf ? "fp16" : "bf16", scaled);
}

// Built, on the device, rank 0's on every rank, and said in the log.
MocoV3Model make_model(const run::Config& c, const run::RunContext& ctx, int64_t in_channels,
                       const StepPrecision& precision) {
  MocoV3Model model([&] { return v3_backbone(c, in_channels); }, v3_options(c, precision), ctx.group);
  model->to(ctx.device);
  if (c.dist.world_group_at_one) model::use_sync_batchnorm(*model, ctx.group);  // rehearses SyncBN's collectives
  if (c.train.channels_last) run::use_channels_last(*model);
  if (ctx.group->world_size() > 1 || c.dist.world_group_at_one)
    dist::broadcast_parameters(parameters_and_buffers(*model), *ctx.group);
  model->train();
  spdlog::info("MoCo v3 {}: {} trained parameters, projector {}x{} to {}, predictor {}x{}, {} rank(s) on {}, {}, {}",
               c.model.arch, model::count_parameters(*model->encoder_q) + model::count_parameters(*model->predictor),
               settings(c).projector_layers, settings(c).mlp_dim, c.model.dim, settings(c).predictor_layers,
               settings(c).mlp_dim, ctx.group->world_size(), ctx.device.str(), c.optim.optimizer, describe(precision));
  return model;
}

std::vector<torch::Tensor> every_buffer(MocoV3ModelImpl& model) {
  std::vector<torch::Tensor> buffers;
  for (torch::nn::Module* module :
       std::initializer_list<torch::nn::Module*>{model.encoder_q.get(), model.encoder_k.get(), model.predictor.get()})
    for (const auto& b : module->buffers()) buffers.push_back(b);
  return buffers;
}

}  // namespace

MocoV3::MocoV3(const run::Config& c, const run::RunContext& ctx, int64_t in_channels, const StepPrecision& precision)
    : MomentumMethod(c, ctx),
      model_(make_model(c, ctx, in_channels, precision)),
      optimizer_(c.optim.optimizer, model_->trainable_parameters(), c.optim.momentum, c.optim.weight_decay),
      momentum_parameters_(model_->encoder_k->parameters()),
      buffers_(model::flat_tensors_by_kind(every_buffer(*model_))),
      rollback_(momentum_parameters_, buffers_) {
  average_gradients(model_->trainable_parameters(), model_->trainable_names());
  if (precision.loss_scale) scaler_.emplace(*precision.loss_scale, ctx.device);
  torch::autograd::AnomalyMode::set_enabled(c.debug.anomaly_detection);
  if (c.debug.anomaly_detection) spdlog::info("debug: autograd anomaly detection on");
  if (c.optim.micro_batch > 0)
    spdlog::info(
        "optim.micro_batch {}: each rank's share in pieces of {} images (the backbone twice per piece, the "
        "heads, their BatchNorm and the loss once over the whole batch){}",
        c.optim.micro_batch, c.optim.micro_batch,
        run::is_vit(c.model.arch) ? ""
                                  : fmt::format("; {}'s own BatchNorm normalises each piece apart, as a smaller batch "
                                                "per rank would, its running statistics moved once per piece",
                                                c.model.arch));
}

double scheduled_momentum(const Settings& s, double progress) {
  return s.momentum_schedule == "constant" ? s.momentum : momentum_at(s.momentum, progress);
}

double MocoV3::momentum_for_step(int64_t step) const {
  const double progress = static_cast<double>(step - 1) / static_cast<double>(std::max<int64_t>(1, total_steps_));
  return scheduled_momentum(settings(config_), std::min(1.0, progress));
}

V3Output MocoV3::forward(const data::TwoViewBatch& batch, int64_t step) {
  const auto x1 = run::to_device(batch.query, context_.device, config_.train.channels_last);
  const auto x2 = run::to_device(batch.key, context_.device, config_.train.channels_last);
  const auto query_view = [&](const torch::Tensor& x) { return spoiled_view(x, step, sys::NanTarget::kQueries); };
  const auto key_view = [&](const torch::Tensor& x) { return spoiled_view(x, step, sys::NanTarget::kKeys); };
  auto out = model_->forward(query_view(x1), query_view(x2), key_view(x1), key_view(x2), momentum_for_step(step));
  spoil_loss_and_gradients(out.loss, out.q1, step);
  return out;
}

V3Output MocoV3::forward_backward_in_pieces(const data::TwoViewBatch& batch, int64_t step) {
  const auto x1 = run::to_device(batch.query, context_.device, config_.train.channels_last);
  const auto x2 = run::to_device(batch.key, context_.device, config_.train.channels_last);
  const auto query_view = [&](const torch::Tensor& x) { return spoiled_view(x, step, sys::NanTarget::kQueries); };
  const auto key_view = [&](const torch::Tensor& x) { return spoiled_view(x, step, sys::NanTarget::kKeys); };
  run::PieceHooks<V3Output> hooks;
  hooks.loss_to_backward = [&](V3Output& out) {
    spoil_loss_and_gradients(out.loss, out.q1, step);
    return scaler_ ? scaler_->scale(out.loss) : out.loss;
  };
  hooks.before_first_backward = [this] { accumulate_gradients_locally(true); };
  hooks.before_last_backward = [this] { accumulate_gradients_locally(false); };
  return model_->forward_backward_in_pieces(query_view(x1), query_view(x2), key_view(x1), key_view(x2),
                                            momentum_for_step(step), config_.optim.micro_batch, hooks);
}

// The official main_moco.py's step: both views, the momentum update, the symmetric loss (scaled
// with fp16), the backward, the gradients averaged across ranks (DDP), the optimizer's update; with
// optim.micro_batch below the rank's share, forward and backward in its pieces. Where any rank's
// queries, keys, loss or (without a loss scale) gradients hold NaN or Inf, every rank keeps its
// state instead, decided on the device (model::StepRollback).
run::StepOutput MocoV3::step(const data::TwoViewBatch& batch, int64_t step) {
  rollback_.snapshot();
  const int64_t piece = config_.optim.micro_batch, share = batch.query.size(0);
  V3Output out;
  if (piece > 0 && piece < share) {
    optimizer_.zero_grad();
    out = forward_backward_in_pieces(batch, step);
  } else {
    out = forward(batch, step);
    optimizer_.zero_grad();
    (scaler_ ? scaler_->scale(out.loss) : out.loss).backward();
  }
  run::StepOutput result;
  finish_step(out, result);
  result.loss = out.loss.detach();
  result.scalars = accuracies(out.positive_rank);
  result.gradient_bytes = gradient_bytes();
  result.features = out.features;
  return result;
}

// A step the loss scale skips (Inf or NaN in the scaled gradients, its normal backoff) is not a bad
// step: as torch.cuda.amp.GradScaler in main_moco.py, only the optimizer's step is skipped and the
// scale halved; the momentum update and the BatchNorm statistics stay. A bad step keeps nothing,
// the scale included.
void MocoV3::finish_step(const V3Output& out, run::StepOutput& result) {
  // This rank's own gradients, before they are averaged: the flag then names the rank they came from.
  const auto gradients_nonfinite = scaler_ ? torch::Tensor() : optimizer_.nonfinite_gradients();
  finish_gradients();
  auto agreed = model::agree_on_step(
      model::nonfinite_causes({out.q1, out.q2}, {out.k1, out.k2}, out.loss, gradients_nonfinite), *context_.group);
  result.nonfinite_by_rank = std::move(agreed.nonfinite_by_rank);
  result.trained = std::move(agreed.trained);
  rollback_.restore_unless(result.trained);
  auto apply = result.trained;
  if (scaler_) {
    const auto found_inf = scaler_->unscale_(optimizer_.gradients());
    apply = apply.logical_and(found_inf.eq(0).reshape({}));
    scaler_->update(found_inf, result.trained);
  }
  optimizer_.step(apply);
}

void MocoV3::agree_on_buffers() {
  if (context_.group->world_size() > 1 || config_.dist.world_group_at_one)
    dist::broadcast_parameters(model_->buffers(), *context_.group);
}

std::vector<ckpt::StateEntry> v3_state_entries(MocoV3ModelImpl& model, const optim::Optimizer& optimizer,
                                               const model::GradScaler* scaler) {
  std::vector<ckpt::StateEntry> entries;
  run::add_module_entries(entries, run::kQueryEncoderGroup, *model.encoder_q);
  run::add_module_entries(entries, run::kMomentumEncoderGroup, *model.encoder_k);
  run::add_module_entries(entries, "predictor/", *model.predictor);
  for (auto& [name, tensor] : optimizer.state(model.trainable_names()))
    entries.push_back({run::kOptimizerGroup + name, tensor});
  if (scaler)
    for (auto& [name, tensor] : scaler->state()) entries.push_back({name, tensor});
  return entries;
}

run::MethodFacts MocoV3::facts() {
  return {model::count_parameters(*model_->encoder_q) + model::count_parameters(*model_->predictor),
          "SyncBN over the global batch"};
}

}  // namespace moco::moco_v3
