#include "run/initial_weights.h"

#include <fmt/format.h>

#include <stdexcept>

namespace moco::run {
namespace {

std::vector<std::pair<std::string, torch::Tensor>> named_tensors(model::BackboneImpl& net) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : net.named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : net.named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace

InitialWeights::InitialWeights(model::Backbone encoder) {
  torch::NoGradGuard no_grad;
  // On the host: a device's memory is the step's, and the copy is used once or twice in a run.
  for (auto& [name, tensor] : named_tensors(*encoder))
    tensors_.emplace_back(name, tensor.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
}

void InitialWeights::lend(model::Backbone encoder, const std::function<void()>& use) const {
  torch::NoGradGuard no_grad;
  auto live = named_tensors(*encoder);
  if (live.size() != tensors_.size())
    throw std::logic_error(
        fmt::format("InitialWeights: the encoder holds {} tensors, the copy {}", live.size(), tensors_.size()));
  for (size_t i = 0; i < live.size(); ++i)
    if (live[i].first != tensors_[i].first)
      throw std::logic_error(fmt::format("InitialWeights: tensor {} is '{}' in the encoder, '{}' in the copy", i,
                                         live[i].first, tensors_[i].first));
  // Checked, then copied, before anything is overwritten.
  std::vector<torch::Tensor> own;
  own.reserve(live.size());
  for (const auto& [name, tensor] : live) own.push_back(tensor.detach().clone());
  // They come back also when `use` (or a copy) throws: a failed evaluation must not leave the run
  // training from its initial weights.
  struct GiveBack {
    std::vector<std::pair<std::string, torch::Tensor>>& live;
    const std::vector<torch::Tensor>& own;
    ~GiveBack() {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < own.size(); ++i) live[i].second.detach().copy_(own[i]);
    }
  } give_back{live, own};
  for (size_t i = 0; i < live.size(); ++i) live[i].second.detach().copy_(tensors_[i].second);
  use();
}

}  // namespace moco::run
