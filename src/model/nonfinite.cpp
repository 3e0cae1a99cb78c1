#include "model/nonfinite.h"

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

}  // namespace moco::model
