#include "optim/optimizer.h"

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

void Optimizer::step() {
  if (lars_) lars_->step();
  if (adamw_) adamw_->step();
  if (sgd_) sgd_->step();
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
