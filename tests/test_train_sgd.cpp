#include "train/sgd.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

// MomentumSgd replaces LibTorch's SGD so that its buffers can be checkpointed by name; it must take
// the same steps, bit for bit, zero-initialised buffers included.
TEST(MomentumSgdTest, StepsBitwiseLikeTorchSgd) {
  torch::manual_seed(9);
  std::vector<torch::Tensor> a, b;
  for (auto shape : {std::vector<int64_t>{4, 3}, std::vector<int64_t>{7}, std::vector<int64_t>{2, 3, 3, 3}}) {
    auto p = torch::randn(shape);
    a.push_back(p.clone().set_requires_grad(true));
    b.push_back(p.clone().set_requires_grad(true));
  }
  torch::optim::SGD reference(a, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  moco::train::MomentumSgd mine(b, 0.9, 1e-4);
  for (int step = 0; step < 6; ++step) {
    const double lr = 0.1 / (1 + step);
    for (auto& g : reference.param_groups()) g.options().set_lr(lr);
    mine.set_lr(lr);
    reference.zero_grad();
    mine.zero_grad();
    for (size_t i = 0; i < a.size(); ++i) {
      const auto grad = torch::randn(a[i].sizes());
      a[i].mutable_grad() = grad.clone();
      b[i].mutable_grad() = grad.clone();
    }
    reference.step();
    mine.step();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(torch::equal(a[i], b[i])) << "step " << step << " tensor " << i;
  }
  EXPECT_FALSE(torch::equal(mine.momentum_buffers()[0], torch::zeros_like(b[0])));
}

// The momentum buffers take each parameter's memory order, so a channels-last weight's update is
// element by element over matching strides.
TEST(MomentumSgdTest, BuffersKeepTheParametersMemoryOrder) {
  auto weight = torch::randn({4, 3, 3, 3}).contiguous(torch::MemoryFormat::ChannelsLast).set_requires_grad(true);
  auto bias = torch::randn({4}).set_requires_grad(true);
  moco::train::MomentumSgd sgd({weight, bias}, 0.9, 1e-4);
  EXPECT_EQ(sgd.momentum_buffers()[0].strides(), weight.strides());
  EXPECT_EQ(sgd.momentum_buffers()[1].strides(), bias.strides());
}
