#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace moco::train {
namespace {

torch::Tensor generator_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(const torch::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

int64_t index_of(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) throw std::logic_error("progress/" + name + " is not in this run's checkpoint layout");
  return it - names.begin();
}

}  // namespace

TrainState::TrainState(std::vector<ckpt::StateEntry> entries, const Layout& layout)
    : counter_names_(layout.counters),
      value_names_(layout.values),
      counters_(torch::zeros({static_cast<int64_t>(layout.counters.size())}, torch::kInt64)),
      values_(torch::zeros({static_cast<int64_t>(layout.values.size())}, torch::kFloat64)),
      entries_(std::move(entries)) {
  for (size_t i = 0; i < counter_names_.size(); ++i)
    entries_.push_back({"progress/" + counter_names_[i], counters_.narrow(0, static_cast<int64_t>(i), 1)});
  for (size_t i = 0; i < value_names_.size(); ++i)
    entries_.push_back({"progress/" + value_names_[i], values_.narrow(0, static_cast<int64_t>(i), 1)});
  if (layout.generator) {
    rng_ = generator_state().clone();
    entries_.push_back({"rng/torch_cpu", rng_, /*rank_local=*/true});
  }
}

int64_t& TrainState::counter(const std::string& name) {
  return counters_.data_ptr<int64_t>()[index_of(counter_names_, name)];
}

double& TrainState::value(const std::string& name) { return values_.data_ptr<double>()[index_of(value_names_, name)]; }

const std::vector<ckpt::StateEntry>& TrainState::entries_for_save(const Progress& p) {
  counter("step") = p.step;
  counter("epoch") = p.epoch;
  counter("batch_in_epoch") = p.batch_in_epoch;
  value("train_seconds") = p.train_seconds;
  if (rng_.defined()) rng_.copy_(generator_state());
  return entries_;
}

Progress TrainState::restored_progress() {
  Progress p;
  p.step = counter("step");
  p.epoch = counter("epoch");
  p.batch_in_epoch = counter("batch_in_epoch");
  p.train_seconds = value("train_seconds");
  if (rng_.defined()) set_generator_state(rng_);
  return p;
}

}  // namespace moco::train
