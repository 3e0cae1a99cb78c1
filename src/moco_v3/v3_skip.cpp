#include "moco_v3/v3_skip.h"

#include "model/nonfinite.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

namespace moco::moco_v3 {
namespace {

std::vector<torch::Tensor> every_buffer(MocoV3ModelImpl& model) {
  std::vector<torch::Tensor> buffers;
  for (torch::nn::Module* module :
       std::initializer_list<torch::nn::Module*>{model.encoder_q.get(), model.encoder_k.get(), model.predictor.get()})
    for (const auto& b : module->buffers()) buffers.push_back(b);
  return buffers;
}

}  // namespace

StepRollback::StepRollback(MocoV3ModelImpl& model)
    : momentum_parameters_(model.encoder_k->parameters()), buffers_(model::flat_tensors_by_kind(every_buffer(model))) {}

void StepRollback::snapshot() {
  RECORD_USER_SCOPE("update/skip_snapshot");  // Note [Update scopes] (sys/op_count.h)
  torch::NoGradGuard no_grad;
  momentum_parameters_before_ = momentum_parameters_.flat().clone();
  buffers_before_.clear();
  for (auto& kind : buffers_) buffers_before_.push_back(kind.flat().clone());
}

// The buffers are written through their flat buffer, without bumping their versions: nothing saved
// for a backward holds them any more (this comes after the backward).
void StepRollback::restore_unless(const torch::Tensor& keep_new) {
  RECORD_USER_SCOPE("update/skip_restore");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    auto values = buffers_[i].flat();
    torch::where_out(values, keep_new, values, buffers_before_[i]);
  }
  auto k = momentum_parameters_.flat();
  torch::where_out(k, keep_new, k, momentum_parameters_before_);
  momentum_parameters_.bump_versions();
}

torch::Tensor local_nonfinite_causes(const V3Output& out, const torch::Tensor& gradients_nonfinite) {
  RECORD_USER_SCOPE("update/skip_flag");
  torch::NoGradGuard no_grad;
  const auto queries = model::holds_nonfinite(std::vector<torch::Tensor>{out.q1, out.q2});
  const auto keys = model::holds_nonfinite(std::vector<torch::Tensor>{out.k1, out.k2});
  const auto loss = model::holds_nonfinite(out.loss);
  const auto gradients = gradients_nonfinite.defined() ? gradients_nonfinite : torch::zeros_like(loss);
  // Bit i for the i-th: model::kNonfiniteQueries, kNonfiniteKeys, kNonfiniteLoss, kNonfiniteGradients.
  const auto bits = torch::arange(4, out.loss.options().dtype(torch::kInt32));
  return torch::stack({queries, keys, loss, gradients}).to(torch::kInt32).bitwise_left_shift(bits).sum(torch::kInt32);
}

}  // namespace moco::moco_v3
