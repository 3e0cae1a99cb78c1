#include "train/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

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

TrainState::TrainState(model::MocoImpl& moco, MomentumSgd& sgd, bool bn_buffers_rank_local)
    : moco_(moco),
      counters_(torch::zeros({4}, torch::kInt64)),
      seconds_(torch::zeros({2}, torch::kFloat64)),
      rng_(generator_state().clone()) {
  for (auto* encoder : {&moco.encoder_q, &moco.encoder_k}) {
    const std::string module = encoder == &moco.encoder_q ? "encoder_q/" : "encoder_k/";
    for (const auto& item : (*encoder)->named_parameters()) entries_.push_back({module + item.key(), item.value()});
    for (const auto& item : (*encoder)->named_buffers())
      entries_.push_back({module + item.key(), item.value(), bn_buffers_rank_local});
  }
  const auto queue = moco.queue_state();
  entries_.push_back({"moco/queue", queue[0]});
  entries_.push_back({"moco/queue_ptr", queue[1]});
  const auto names = moco.encoder_q->named_parameters();
  const auto& buffers = sgd.momentum_buffers();
  for (size_t i = 0; i < buffers.size(); ++i)
    entries_.push_back({"optimizer/momentum_buffer/" + names[i].key(), buffers[i]});
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
  moco_.set_shuffle_steps(p.shuffle_steps);
  set_generator_state(rng_);
  return p;
}

}  // namespace moco::train
