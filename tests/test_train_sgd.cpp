#include "run/sgd.h"

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
  moco::run::MomentumSgd mine(b, 0.9, 1e-4);
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
  moco::run::MomentumSgd sgd({weight, bias}, 0.9, 1e-4);
  EXPECT_EQ(sgd.momentum_buffers()[0].strides(), weight.strides());
  EXPECT_EQ(sgd.momentum_buffers()[1].strides(), bias.strides());
}

// A step skipped on the device (apply false) leaves parameters and buffers as they were, even with
// NaN gradients; apply true takes the same step, bit for bit, as no flag.
TEST(MomentumSgdTest, AStepNotAppliedChangesNothingAndAnAppliedOneIsThePlainStep) {
  torch::manual_seed(3);
  const auto start = torch::randn({5, 4});
  auto masked = start.clone().set_requires_grad(true), plain = start.clone().set_requires_grad(true);
  moco::run::MomentumSgd masked_sgd({masked}, 0.9, 1e-4), plain_sgd({plain}, 0.9, 1e-4);
  masked_sgd.set_lr(0.5);
  plain_sgd.set_lr(0.5);
  for (int step = 0; step < 3; ++step) {
    const auto grad = torch::randn({5, 4});
    masked.mutable_grad() = grad.clone();
    plain.mutable_grad() = grad.clone();
    masked_sgd.step(torch::tensor(true));
    plain_sgd.step();
    ASSERT_TRUE(torch::equal(masked, plain)) << "step " << step;
    ASSERT_TRUE(torch::equal(masked_sgd.momentum_buffers()[0], plain_sgd.momentum_buffers()[0]));
  }
  const auto weights_before = masked.detach().clone(), buffer_before = masked_sgd.momentum_buffers()[0].clone();
  masked.mutable_grad() = torch::full({5, 4}, std::nan(""));
  masked_sgd.step(torch::tensor(false));
  EXPECT_TRUE(torch::equal(masked, weights_before));
  EXPECT_TRUE(torch::equal(masked_sgd.momentum_buffers()[0], buffer_before));
}
