#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>
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
}  // namespace

TrainState::TrainState(std::vector<ckpt::StateEntry> method_entries)
    : counters_(torch::zeros({4}, torch::kInt64)),
      seconds_(torch::zeros({2}, torch::kFloat64)),
      rng_(generator_state().clone()),
      entries_(std::move(method_entries)) {
  const char* counter_names[] = {"step", "epoch", "batch_in_epoch", "shuffle_steps"};
  for (int64_t i = 0; i < 4; ++i)
    entries_.push_back({std::string("progress/") + counter_names[i], counters_.narrow(0, i, 1)});
  entries_.push_back({"progress/train_seconds", seconds_.narrow(0, 0, 1)});
  entries_.push_back({"progress/knn_random_init", seconds_.narrow(0, 1, 1)});
  entries_.push_back({"rng/torch_cpu", rng_, /*rank_local=*/true});
}

const std::vector<ckpt::StateEntry>& TrainState::entries_for_save(const Progress& p) {
  auto* c = counters_.data_ptr<int64_t>();
  c[0] = p.step;
  c[1] = p.epoch;
  c[2] = p.batch_in_epoch;
  c[3] = p.shuffle_steps;
  auto* s = seconds_.data_ptr<double>();
  s[0] = p.train_seconds;
  s[1] = p.knn_random_init;
  rng_.copy_(generator_state());
  return entries_;
}

Progress TrainState::restored_progress() {
  const auto* c = counters_.data_ptr<int64_t>();
  const auto* s = seconds_.data_ptr<double>();
  Progress p;
  p.step = c[0];
  p.epoch = c[1];
  p.batch_in_epoch = c[2];
  p.shuffle_steps = c[3];
  p.train_seconds = s[0];
  p.knn_random_init = s[1];
  set_generator_state(rng_);
  return p;
}

}  // namespace moco::train
