#include "run/momentum_method.h"

#include "model/positive_rank.h"

#include <torch/torch.h>

#include <cmath>

namespace moco::run {

MomentumMethod::MomentumMethod(const Config& config, const RunContext& context)
    : config_(config), context_(context), nan_(sys::hooks().nan_injection()) {}

void MomentumMethod::average_gradients(std::vector<torch::Tensor> parameters, std::vector<std::string> names) {
  reducer_.emplace(std::move(parameters), context_.group, static_cast<int64_t>(config_.dist.bucket_mb * (1 << 20)),
                   static_cast<int64_t>(config_.dist.first_bucket_mb * (1 << 20)), std::move(names));
  // A world of one that rehearses world N keeps the buckets, their hooks and all-reduces (the
  // reducer switches itself off at world size 1).
  if (config_.dist.world_group_at_one) reducer_->set_enabled(true);
}

torch::Tensor MomentumMethod::spoiled_view(const torch::Tensor& x, int64_t step, sys::NanTarget encoder) const {
  return nan_.hits(step, context_.group->rank(), encoder) ? torch::full_like(x, std::nan("")) : x;
}

void MomentumMethod::spoil_loss_and_gradients(torch::Tensor& loss, const torch::Tensor& queries, int64_t step) const {
  const int rank = context_.group->rank();
  if (nan_.hits(step, rank, sys::NanTarget::kLoss)) loss = loss + std::nan("");
  if (nan_.hits(step, rank, sys::NanTarget::kGradients))
    queries.register_hook([](const torch::Tensor& grad) { return torch::full_like(grad, std::nan("")); });
}

std::vector<StepScalar> MomentumMethod::step_scalars() const {
  return {{"acc1", "acc@1", "%", 1, /*in_epoch_line=*/true}, {"acc5", "acc@5", "%", 1, false}};
}

torch::Tensor MomentumMethod::accuracies(const torch::Tensor& positive_rank) {
  return model::positive_rank_accuracies(positive_rank, {1, 5});
}

void add_module_entries(std::vector<ckpt::StateEntry>& entries, const std::string& group, torch::nn::Module& module,
                        bool buffers_rank_local) {
  for (const auto& item : module.named_parameters()) entries.push_back({group + item.key(), item.value()});
  for (const auto& item : module.named_buffers())
    entries.push_back({group + item.key(), item.value(), buffers_rank_local});
}

}  // namespace moco::run
