#include "moco_v3/moco_v3.h"

#include "model/positive_rank.h"
#include "model/sync_batchnorm.h"
#include "moco_v3/v3_settings.h"
#include "run/device.h"
#include "run/setup.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

namespace moco::moco_v3 {
namespace {

V3Options v3_options(const run::Config& c) {
  const Settings& s = settings(c);
  V3Options options{c.model.dim,        s.mlp_dim,     s.projector_layers,
                    s.predictor_layers, s.temperature, c.train.precision == run::Precision::kBf16};
  options.predictor_last_bn = s.predictor_last_bn;
  return options;
}

}  // namespace

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

// Built, on the device, rank 0's on every rank, and said in the log.
MocoV3Model make_model(const run::Config& c, const run::RunContext& ctx, int64_t in_channels) {
  MocoV3Model model([&] { return v3_backbone(c, in_channels); }, v3_options(c), ctx.group);
  model->to(ctx.device);
  if (c.dist.world_group_at_one) model::use_sync_batchnorm(*model, ctx.group);  // rehearses SyncBN's collectives
  if (c.train.channels_last) run::use_channels_last(*model);
  if (ctx.group->world_size() > 1 || c.dist.world_group_at_one)
    dist::broadcast_parameters(parameters_and_buffers(*model), *ctx.group);
  model->train();
  spdlog::info("MoCo v3 {}: {} trained parameters, projector {}x{} to {}, predictor {}x{}, {} rank(s) on {}, {}, {}",
               c.model.arch, model::count_parameters(*model->encoder_q) + model::count_parameters(*model->predictor),
               settings(c).projector_layers, settings(c).mlp_dim, c.model.dim, settings(c).predictor_layers,
               settings(c).mlp_dim, ctx.group->world_size(), ctx.device.str(), c.optim.optimizer,
               model->options().bf16 ? "bf16 autocast" : "fp32");
  return model;
}

}  // namespace

MocoV3::MocoV3(const run::Config& c, const run::RunContext& ctx, int64_t in_channels)
    : config_(c),
      context_(ctx),
      model_(make_model(c, ctx, in_channels)),
      optimizer_(c.optim.optimizer, model_->trainable_parameters(), c.optim.momentum, c.optim.weight_decay),
      reducer_(model_->trainable_parameters(), ctx.group, static_cast<int64_t>(c.dist.bucket_mb * (1 << 20)),
               static_cast<int64_t>(c.dist.first_bucket_mb * (1 << 20)), model_->trainable_names()) {
  if (c.dist.world_group_at_one) reducer_.set_enabled(true);
  torch::autograd::AnomalyMode::set_enabled(c.debug.anomaly_detection);
  if (c.debug.anomaly_detection) spdlog::info("debug: autograd anomaly detection on");
}

double MocoV3::momentum_for_step(int64_t step) const {
  const double progress = static_cast<double>(step - 1) / static_cast<double>(std::max<int64_t>(1, total_steps_));
  return momentum_at(settings(config_).momentum, std::min(1.0, progress));
}

// The official main_moco.py's step: both views, the momentum update, the symmetric loss, the
// backward, the gradients averaged across ranks (DDP), the optimizer's update.
run::StepOutput MocoV3::step(const data::TwoViewBatch& batch, int64_t step) {
  const auto x1 = run::to_device(batch.query, context_.device, config_.train.channels_last);
  const auto x2 = run::to_device(batch.key, context_.device, config_.train.channels_last);
  auto out = model_->forward(x1, x2, momentum_for_step(step));
  optimizer_.zero_grad();
  out.loss.backward();
  reducer_.finalize();
  optimizer_.step();
  run::StepOutput result;
  result.loss = out.loss.detach();
  result.scalars = model::positive_rank_accuracies(out.positive_rank, {1, 5});
  result.gradient_bytes = reducer_.last_stats().bytes_reduced;
  result.features = out.features;
  return result;
}

void MocoV3::agree_on_buffers() {
  if (context_.group->world_size() > 1 || config_.dist.world_group_at_one)
    dist::broadcast_parameters(model_->buffers(), *context_.group);
}

std::vector<ckpt::StateEntry> v3_state_entries(MocoV3ModelImpl& model, const optim::Optimizer& optimizer) {
  std::vector<ckpt::StateEntry> entries;
  const std::pair<const char*, torch::nn::Module*> modules[] = {{"encoder_q/", model.encoder_q.get()},
                                                                {"encoder_k/", model.encoder_k.get()},
                                                                {"predictor/", model.predictor.get()}};
  for (const auto& [prefix, module] : modules) {
    for (const auto& item : module->named_parameters()) entries.push_back({prefix + item.key(), item.value()});
    for (const auto& item : module->named_buffers()) entries.push_back({prefix + item.key(), item.value()});
  }
  for (auto& [name, tensor] : optimizer.state(model.trainable_names()))
    entries.push_back({"optimizer/" + name, tensor});
  return entries;
}

// The first loss term's accuracies: how often a query's own key outscores the other gathered keys
// (acc@1), all but four (acc@5).
std::vector<run::StepScalar> MocoV3::step_scalars() const {
  return {{"acc1", "acc@1", "%", 1, /*in_epoch_line=*/true}, {"acc5", "acc@5", "%", 1, false}};
}

run::MethodFacts MocoV3::facts() {
  return {model::count_parameters(*model_->encoder_q) + model::count_parameters(*model_->predictor),
          "SyncBN over the global batch"};
}

}  // namespace moco::moco_v3
