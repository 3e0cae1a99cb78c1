#include "model/nonfinite.h"

#include <torch/torch.h>

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

std::string nonfinite_causes_text(int32_t causes) {
  std::string text;
  for (const auto& [bit, name] : {std::pair{kNonfiniteQueries, "queries"}, std::pair{kNonfiniteKeys, "keys"},
                                  std::pair{kNonfiniteLoss, "loss"}, std::pair{kNonfiniteGradients, "gradients"}})
    if (causes & bit) text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

}  // namespace moco::model
