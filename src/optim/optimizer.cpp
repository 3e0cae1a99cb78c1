#include "optim/optimizer.h"

#include "model/nonfinite.h"

#include <ATen/record_function.h>

namespace moco::optim {

Optimizer::Optimizer(Algorithm algorithm, std::vector<torch::Tensor> parameters, double momentum, double weight_decay) {
  if (algorithm == Algorithm::kLars)
    lars_.emplace(std::move(parameters), momentum, weight_decay);
  else if (algorithm == Algorithm::kAdamw)
    adamw_.emplace(std::move(parameters), weight_decay);
  else
    sgd_.emplace(std::move(parameters), momentum, weight_decay);
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

void Optimizer::step(const torch::Tensor& apply) {
  if (lars_) lars_->step(apply);
  if (adamw_) adamw_->step(apply);
  if (sgd_) sgd_->step(apply);
}

std::vector<torch::Tensor> Optimizer::gradients() const {
  const auto& params = lars_ ? lars_->parameters() : adamw_ ? adamw_->parameters() : sgd_->parameters();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad());
  return grads;
}

torch::Tensor Optimizer::nonfinite_gradients() const {
  RECORD_USER_SCOPE("update/skip_flag");
  if (sgd_) return sgd_->nonfinite_gradients();  // one reduction over its flat gradient buffer
  return model::holds_nonfinite(gradients());
}

namespace {

void add_named(std::vector<std::pair<std::string, torch::Tensor>>& state, const std::string& prefix,
               const std::vector<std::string>& names, const std::vector<torch::Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) state.emplace_back(prefix + names[i], tensors[i]);
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state(const std::vector<std::string>& names) const {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  if (lars_) add_named(state, "momentum_buffer/", names, lars_->momentum_buffers());
  if (sgd_) add_named(state, "momentum_buffer/", names, sgd_->momentum_buffers());
  if (adamw_) {
    add_named(state, "exp_avg/", names, adamw_->exp_avg());
    add_named(state, "exp_avg_sq/", names, adamw_->exp_avg_sq());
    state.emplace_back("steps", adamw_->steps());
  }
  return state;
}

}  // namespace moco::optim
