#include "model/grad_scaler.h"

#include "model/nonfinite.h"

#include <torch/torch.h>

#include <limits>
#include <stdexcept>

namespace moco::model {

GradScaler::GradScaler(const GradScalerOptions& options, torch::Device device) : options_(options) {
  if (!(options.growth_factor > 1.0)) throw std::invalid_argument("GradScaler: the growth factor must be > 1");
  if (!(options.backoff_factor < 1.0) || !(options.backoff_factor > 0.0))
    throw std::invalid_argument("GradScaler: the backoff factor must be in (0, 1)");
  if (!(options.init_scale > 0.0) || !(options.init_scale <= std::numeric_limits<float>::max()))
    throw std::invalid_argument("GradScaler: the initial scale must be a positive finite float");
  if (options.growth_interval < 1) throw std::invalid_argument("GradScaler: the growth interval must be >= 1");
  scale_ = torch::full({1}, options.init_scale, torch::dtype(torch::kFloat).device(device));
  growth_tracker_ = torch::zeros({1}, torch::dtype(torch::kInt).device(device));
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

torch::Tensor GradScaler::unscale_(const std::vector<torch::Tensor>& grads) const {
  torch::NoGradGuard no_grad;
  const auto inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat).reshape({});
  std::vector<torch::Tensor> found;
  for (auto grad : grads) {
    if (!grad.defined()) continue;
    found.push_back(holds_nonfinite(grad).reshape({1}));
    grad.mul_(inv_scale);
  }
  if (found.empty()) return torch::zeros({1}, scale_.options());
  return torch::cat(found).any().to(torch::kFloat).reshape({1});
}

void GradScaler::update(const torch::Tensor& found_inf, const torch::Tensor& apply) {
  torch::NoGradGuard no_grad;
  const auto skipped = found_inf.to(scale_.device()).reshape({1}).ne(0);
  const auto wide = scale_.to(torch::kDouble);
  const auto backed_off = (wide * options_.backoff_factor).to(torch::kFloat);
  const auto grown = (wide * options_.growth_factor).to(torch::kFloat);
  const auto successful = growth_tracker_ + 1;
  const auto grow = successful.eq(options_.growth_interval);
  const auto after_good_step = torch::where(grow & torch::isfinite(grown), grown, scale_);
  auto new_scale = torch::where(skipped, backed_off, after_good_step);
  auto new_tracker = torch::where(skipped.logical_or(grow), torch::zeros_like(successful), successful);
  if (apply.defined()) {
    const auto keep = apply.to(scale_.device()).reshape({1});
    new_scale = torch::where(keep, new_scale, scale_);
    new_tracker = torch::where(keep, new_tracker, growth_tracker_);
  }
  scale_.copy_(new_scale);
  growth_tracker_.copy_(new_tracker);
}

std::vector<std::pair<std::string, torch::Tensor>> GradScaler::state() const {
  return {{"scaler/scale", scale_}, {"scaler/growth_tracker", growth_tracker_}};
}

}  // namespace moco::model
