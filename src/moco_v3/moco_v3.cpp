#include "moco_v3/moco_v3.h"

#include "model/sync_batchnorm.h"
#include "run/device.h"
#include "run/setup.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

namespace moco::moco_v3 {

V3Options v3_options(const run::Config& c) {
  return {c.model.dim,           c.v3.mlp_dim,     c.v3.projector_layers,
          c.v3.predictor_layers, c.v3.temperature, c.train.precision == run::Precision::kBf16};
}

namespace {

std::vector<torch::Tensor> parameters_and_buffers(torch::nn::Module& module) {
  auto tensors = module.parameters();
  for (const auto& b : module.buffers()) tensors.push_back(b);
  return tensors;
}

// Built, on the device, rank 0's on every rank, and said in the log.
MocoV3Model make_model(const run::Config& c, const run::RunContext& ctx, int64_t in_channels,
                       const V3Options& options) {
  MocoV3Model model([&] { return run::make_backbone(c, in_channels); }, options, ctx.group);
  model->to(ctx.device);
  if (c.dist.world_group_at_one) model::use_sync_batchnorm(*model, ctx.group);  // rehearses SyncBN's collectives
  if (c.train.channels_last) run::use_channels_last(*model);
  if (ctx.group->world_size() > 1 || c.dist.world_group_at_one)
    dist::broadcast_parameters(parameters_and_buffers(*model), *ctx.group);
  model->train();
  spdlog::info("MoCo v3 {}: {} trained parameters, projector {}x{} to {}, predictor {}x{}, {} rank(s) on {}, {}, {}",
               c.model.arch, model::count_parameters(*model->encoder_q) + model::count_parameters(*model->predictor),
               c.v3.projector_layers, c.v3.mlp_dim, c.model.dim, c.v3.predictor_layers, c.v3.mlp_dim,
               ctx.group->world_size(), ctx.device.str(), c.optim.optimizer,
               model->options().bf16 ? "bf16 autocast" : "fp32");
  return model;
}

}  // namespace

Optimizer::Optimizer(const run::Config& c, std::vector<torch::Tensor> parameters) {
  if (c.optim.optimizer == run::Optimizer::kLars)
    lars_.emplace(std::move(parameters), c.optim.momentum, c.optim.weight_decay);
  else if (c.optim.optimizer == run::Optimizer::kAdamw)
    adamw_.emplace(std::move(parameters), c.optim.weight_decay);
  else
    sgd_.emplace(std::move(parameters), c.optim.momentum, c.optim.weight_decay);
}

void Optimizer::set_lr(double lr) {
  if (lars_) lars_->set_lr(lr);
  if (adamw_) adamw_->set_lr(lr);
  if (sgd_) sgd_->set_lr(lr);
}

void Optimizer::zero_grad() {
  if (lars_) lars_->zero_grad();
  if (adamw_) adamw_->zero_grad();
  if (sgd_) sgd_->zero_grad();
}

void Optimizer::step() {
  if (lars_) lars_->step();
  if (adamw_) adamw_->step();
  if (sgd_) sgd_->step();
}

namespace {

void add_named(std::vector<ckpt::StateEntry>& entries, const std::string& prefix, const std::vector<std::string>& names,
               const std::vector<torch::Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) entries.push_back({prefix + names[i], tensors[i]});
}

}  // namespace

std::vector<ckpt::StateEntry> Optimizer::state_entries(const std::vector<std::string>& names) const {
  std::vector<ckpt::StateEntry> entries;
  if (lars_) add_named(entries, "optimizer/momentum_buffer/", names, lars_->momentum_buffers());
  if (sgd_) add_named(entries, "optimizer/momentum_buffer/", names, sgd_->momentum_buffers());
  if (adamw_) {
    add_named(entries, "optimizer/exp_avg/", names, adamw_->exp_avg());
    add_named(entries, "optimizer/exp_avg_sq/", names, adamw_->exp_avg_sq());
    entries.push_back({"optimizer/steps", adamw_->steps()});
  }
  return entries;
}

MocoV3::MocoV3(const run::Config& c, const run::RunContext& ctx, int64_t in_channels)
    : MocoV3(c, ctx, in_channels, v3_options(c)) {}

MocoV3::MocoV3(const run::Config& c, const run::RunContext& ctx, int64_t in_channels, const V3Options& options)
    : config_(c),
      context_(ctx),
      model_(make_model(c, ctx, in_channels, options)),
      optimizer_(c, model_->trainable_parameters()),
      reducer_(model_->trainable_parameters(), ctx.group, static_cast<int64_t>(c.dist.bucket_mb * (1 << 20)),
               static_cast<int64_t>(c.dist.first_bucket_mb * (1 << 20)), model_->trainable_names()) {
  if (c.dist.world_group_at_one) reducer_.set_enabled(true);
}

double MocoV3::momentum_for_step(int64_t step) const {
  const double progress = static_cast<double>(step - 1) / static_cast<double>(std::max<int64_t>(1, total_steps_));
  return momentum_at(config_.v3.momentum, std::min(1.0, progress));
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
  result.positive_rank = out.positive_rank;
  result.gradient_bytes = reducer_.last_stats().bytes_reduced;
  result.features = out.features;
  return result;
}

void MocoV3::agree_on_buffers() {
  if (context_.group->world_size() > 1 || config_.dist.world_group_at_one)
    dist::broadcast_parameters(model_->buffers(), *context_.group);
}

std::vector<ckpt::StateEntry> v3_state_entries(MocoV3ModelImpl& model, const Optimizer& optimizer) {
  std::vector<ckpt::StateEntry> entries;
  const std::pair<const char*, torch::nn::Module*> modules[] = {{"encoder_q/", model.encoder_q.get()},
                                                                {"encoder_k/", model.encoder_k.get()},
                                                                {"predictor/", model.predictor.get()}};
  for (const auto& [prefix, module] : modules) {
    for (const auto& item : module->named_parameters()) entries.push_back({prefix + item.key(), item.value()});
    for (const auto& item : module->named_buffers()) entries.push_back({prefix + item.key(), item.value()});
  }
  for (auto& entry : optimizer.state_entries(model.trainable_names())) entries.push_back(std::move(entry));
  return entries;
}

run::MethodFacts MocoV3::facts() {
  return {model::count_parameters(*model_->encoder_q) + model::count_parameters(*model_->predictor), 1};
}

}  // namespace moco::moco_v3
