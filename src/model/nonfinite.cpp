#include "model/nonfinite.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <optional>

namespace moco::model {

torch::Tensor holds_nonfinite(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  if (t.numel() == 0) return torch::zeros({}, t.options().dtype(torch::kBool));
  // min and max propagate NaN, and an Inf is the max or the min; x - x is 0 for a finite x and NaN
  // for NaN or Inf (no overflow, as max - min could have).
  const auto [lo, hi] = torch::aminmax(t.detach());
  const auto ends = torch::stack({lo, hi});
  return ends.sub(ends).isnan().any();
}

torch::Tensor holds_nonfinite(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> ends;
  std::optional<torch::Device> device;
  bool one_dtype = true;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (!device) device = t.device();
    if (t.numel() == 0) continue;
    const auto [lo, hi] = torch::aminmax(t.detach().reshape({-1}));
    one_dtype = one_dtype && (ends.empty() || ends[0].scalar_type() == lo.scalar_type());
    ends.push_back(lo);
    ends.push_back(hi);
  }
  if (ends.empty()) return torch::zeros({}, torch::dtype(torch::kBool).device(device.value_or(torch::kCPU)));
  // Mixed dtypes meet in fp64, which holds every finite value of the narrower ones.
  if (!one_dtype)
    for (auto& e : ends) e = e.to(torch::kDouble);
  const auto all = torch::stack(ends);
  return all.sub(all).isnan().any();
}

std::string nonfinite_causes_text(int32_t causes) {
  std::string text;
  for (const auto& [bit, name] : {std::pair{kNonfiniteQueries, "queries"}, std::pair{kNonfiniteKeys, "keys"},
                                  std::pair{kNonfiniteLoss, "loss"}, std::pair{kNonfiniteGradients, "gradients"}})
    if (causes & bit) text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

namespace {

// One tensor takes holds_nonfinite's one-tensor path (fewer ops than the list's).
torch::Tensor any_nonfinite(const std::vector<torch::Tensor>& tensors) {
  return tensors.size() == 1 ? holds_nonfinite(tensors[0]) : holds_nonfinite(tensors);
}

}  // namespace

torch::Tensor nonfinite_causes(const std::vector<torch::Tensor>& queries, const std::vector<torch::Tensor>& keys,
                               const torch::Tensor& loss, const torch::Tensor& gradients_nonfinite) {
  RECORD_USER_SCOPE("update/skip_flag");  // Note [Update scopes] (sys/op_count.h)
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bad{any_nonfinite(queries), any_nonfinite(keys), holds_nonfinite(loss)};
  bad.push_back(gradients_nonfinite.defined() ? gradients_nonfinite : torch::zeros_like(bad[0]));
  // Bit i for bad[i]: kNonfiniteQueries, kNonfiniteKeys, kNonfiniteLoss, kNonfiniteGradients.
  const auto bits = torch::arange(static_cast<int64_t>(bad.size()), loss.options().dtype(torch::kInt32));
  return torch::stack(bad).to(torch::kInt32).bitwise_left_shift(bits).sum(torch::kInt32);
}

StepAgreement agree_on_step(const torch::Tensor& local_causes, dist::ProcessGroup& group) {
  StepAgreement agreed;
  agreed.nonfinite_by_rank = group.all_gather(local_causes.view({1}));
  agreed.trained = agreed.nonfinite_by_rank.eq(0).all();
  return agreed;
}

}  // namespace moco::model
