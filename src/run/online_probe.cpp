#include "run/online_probe.h"

#include "eval/knn.h"

#include <torch/torch.h>

namespace moco::run {
namespace {

torch::Tensor zeros_trained(torch::IntArrayRef shape, torch::Device device) {
  return torch::zeros(shape, torch::TensorOptions().device(device)).requires_grad_(true);
}

}  // namespace

OnlineProbe::OnlineProbe(const Config& c, int64_t feature_dim, int64_t num_classes, torch::Device device,
                         dist::ProcessGroup& group)
    : config_(c),
      group_(group),
      weight_(zeros_trained({num_classes, feature_dim}, device)),
      bias_(zeros_trained({num_classes}, device)),
      sgd_({weight_, bias_}, /*momentum=*/0.9, /*weight_decay=*/0) {
  sgd_.set_lr(c.eval.probe_lr);
}

void OnlineProbe::train(const torch::Tensor& features, const torch::Tensor& labels, const torch::Tensor& trained) {
  sgd_.zero_grad();
  // The features have no graph (run::StepOutput): this backward reaches the probe alone.
  const auto logits = torch::addmm(bias_, features.to(weight_.dtype()), weight_.t());
  torch::nn::functional::cross_entropy(logits, labels.to(weight_.device(), /*non_blocking=*/true)).backward();
  // The mean over the ranks' batches, as one process with the global batch would have it.
  auto grads = torch::cat({weight_.grad().flatten(), bias_.grad()});
  group_.all_reduce(grads, dist::ReduceOp::kSum);
  grads.div_(group_.world_size());
  weight_.mutable_grad().copy_(grads.narrow(0, 0, weight_.numel()).view_as(weight_));
  bias_.mutable_grad().copy_(grads.narrow(0, weight_.numel(), bias_.numel()));
  sgd_.step(trained);
}

double OnlineProbe::score(model::Backbone encoder, const data::Dataset& test,
                          const data::AugmentOptions& normalisation) {
  const auto [features, labels] = eval::extract_features(encoder, test, normalisation, config_.knn.batch_size,
                                                         config_.eval.probe_val_size, &group_);
  torch::NoGradGuard no_grad;
  const auto logits = torch::addmm(bias_.cpu(), features.to(weight_.dtype()), weight_.cpu().t());
  return eval::percent_correct(logits.argmax(1), labels);
}

std::vector<ckpt::StateEntry> OnlineProbe::state_entries() const {
  const auto& buffers = sgd_.momentum_buffers();
  return {{"probe/weight", weight_},
          {"probe/bias", bias_},
          {"probe/momentum_buffer/weight", buffers[0]},
          {"probe/momentum_buffer/bias", buffers[1]}};
}

}  // namespace moco::run
