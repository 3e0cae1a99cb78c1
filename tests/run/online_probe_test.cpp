// run::OnlineProbe: its replicas train as one process with the global batch would (the ranks'
// gradients averaged), and a step the method skipped leaves it as it was.
#include "run/online_probe.h"

#include "dist/process_group.h"
#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

constexpr int64_t kProbeDim = 6, kProbeClasses = 3, kProbePerRank = 4;

// The state a checkpoint holds of `probe`, cloned.
std::vector<torch::Tensor> probe_state(const moco::run::OnlineProbe& probe) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : probe.state_entries()) out.push_back(entry.tensor.detach().clone());
  return out;
}

// The same features and labels on every rank for a global batch of `n`, step `step`.
std::pair<torch::Tensor, torch::Tensor> probe_batch(int64_t n, int64_t step) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  return {torch::randn({n, kProbeDim}, gen), torch::randint(kProbeClasses, {n}, gen)};
}

TEST(DistOnlineProbeTest, RanksTrainAsOneProcessWithTheGlobalBatch) {
  auto world = test_world_group();
  const int64_t ranks = world->world_size(), rank = world->rank();
  moco::run::Config config;
  moco::run::OnlineProbe shared(config, kProbeDim, kProbeClasses, torch::kCPU, *world);
  moco::dist::LocalProcessGroup alone;
  moco::run::OnlineProbe single(config, kProbeDim, kProbeClasses, torch::kCPU, alone);
  for (int64_t step = 0; step < 3; ++step) {
    const auto [features, labels] = probe_batch(ranks * kProbePerRank, step);
    single.train(features, labels, torch::Tensor());
    shared.train(features.narrow(0, rank * kProbePerRank, kProbePerRank),
                 labels.narrow(0, rank * kProbePerRank, kProbePerRank), torch::Tensor());
  }
  const auto a = probe_state(shared), b = probe_state(single);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-5, /*atol=*/1e-6))
        << "tensor " << i << " on rank " << rank << " of " << ranks << ": max |a-b| " << (a[i] - b[i]).abs().max();
}

TEST(OnlineProbeTest, AStepTheMethodSkippedLeavesTheProbeAsItWas) {
  moco::run::Config config;
  moco::dist::LocalProcessGroup alone;
  moco::run::OnlineProbe probe(config, kProbeDim, kProbeClasses, torch::kCPU, alone);
  const auto [features, labels] = probe_batch(kProbePerRank, 0);
  probe.train(features, labels, torch::tensor(true));
  const auto before = probe_state(probe);
  ASSERT_GT(before[0].abs().sum().item<double>(), 0.0) << "a trained step changed nothing";
  const auto [next_features, next_labels] = probe_batch(kProbePerRank, 1);
  probe.train(next_features, next_labels, torch::tensor(false));
  const auto after = probe_state(probe);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i])) << "tensor " << i;
}

}  // namespace
