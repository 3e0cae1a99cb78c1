#include "optim/sgd.h"

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
  moco::optim::MomentumSgd mine(b, 0.9, 1e-4);
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
  moco::optim::MomentumSgd sgd({weight, bias}, 0.9, 1e-4);
  EXPECT_EQ(sgd.momentum_buffers()[0].strides(), weight.strides());
  EXPECT_EQ(sgd.momentum_buffers()[1].strides(), bias.strides());
}

// A step skipped on the device (apply false) leaves parameters and buffers as they were, even with
// NaN gradients; apply true takes the same step, bit for bit, as no flag.
TEST(MomentumSgdTest, AStepNotAppliedChangesNothingAndAnAppliedOneIsThePlainStep) {
  torch::manual_seed(3);
  const auto start = torch::randn({5, 4});
  auto masked = start.clone().set_requires_grad(true), plain = start.clone().set_requires_grad(true);
  moco::optim::MomentumSgd masked_sgd({masked}, 0.9, 1e-4), plain_sgd({plain}, 0.9, 1e-4);
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

// As torch.optim.SGD: a parameter whose gradient is undefined at a step stays as it is (weight decay
// and momentum do not move it), while the others take their step.
TEST(MomentumSgdTest, AParameterWithoutAGradientIsLeftAlone) {
  torch::manual_seed(5);
  auto a = torch::randn({3, 2}).set_requires_grad(true), b = torch::randn({4}).set_requires_grad(true);
  auto ra = a.detach().clone().set_requires_grad(true), rb = b.detach().clone().set_requires_grad(true);
  moco::optim::MomentumSgd mine({a, b}, 0.9, 1e-2);
  torch::optim::SGD reference({ra, rb}, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-2));
  mine.set_lr(0.1);
  for (int step = 0; step < 3; ++step) {
    const auto grad = torch::randn({3, 2});
    a.mutable_grad() = grad.clone();
    ra.mutable_grad() = grad.clone();
    const auto b_before = b.detach().clone();
    mine.step();
    reference.step();
    ASSERT_TRUE(torch::equal(a, ra)) << "step " << step;
    ASSERT_TRUE(torch::equal(b, b_before)) << "step " << step;
    ASSERT_TRUE(torch::equal(mine.momentum_buffers()[1], torch::zeros({4})));
  }
}

// A parameter given another memory order after the optimizer was made (use_channels_last on a
// model whose optimizer exists) steps as torch's does, and its buffer follows its memory order.
TEST(MomentumSgdTest, AParameterMadeChannelsLastLaterStepsLikeTorchSgd) {
  torch::manual_seed(6);
  auto w = torch::randn({4, 3, 3, 3}).set_requires_grad(true), bias = torch::randn({4}).set_requires_grad(true);
  auto rw = w.detach().clone().set_requires_grad(true), rbias = bias.detach().clone().set_requires_grad(true);
  moco::optim::MomentumSgd mine({w, bias}, 0.9, 1e-4);
  torch::optim::SGD reference({rw, rbias}, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  mine.set_lr(0.1);
  for (int step = 0; step < 4; ++step) {
    if (step == 2) {
      torch::NoGradGuard no_grad;
      w.set_data(w.contiguous(torch::MemoryFormat::ChannelsLast));
    }
    for (auto* p : {&w, &rw}) p->mutable_grad() = torch::full(p->sizes(), 0.01 * (step + 1)) + p->detach();
    bias.mutable_grad() = torch::ones({4});
    rbias.mutable_grad() = torch::ones({4});
    mine.step();
    reference.step();
    ASSERT_TRUE(torch::equal(w, rw)) << "step " << step;
    ASSERT_TRUE(torch::equal(bias, rbias)) << "step " << step;
  }
  EXPECT_EQ(mine.momentum_buffers()[0].strides(), w.strides());
}

// The update goes through the flat buffer; autograd still learns that the parameters changed.
TEST(MomentumSgdTest, AStepBumpsTheParametersVersion) {
  auto p = torch::randn({3}).set_requires_grad(true);
  moco::optim::MomentumSgd sgd({p}, 0.9, 0);
  sgd.set_lr(0.1);
  p.mutable_grad() = torch::ones({3});
  const auto before = p._version();
  sgd.step(torch::tensor(true));
  EXPECT_GT(p._version(), before);
}

// After the first step every gradient is its slice of one buffer: zero_grad zeroes that buffer, and
// backward accumulates into it in place (AccumulateGrad), so each step sees its own gradient only.
TEST(MomentumSgdTest, ZeroGradThenBackwardGivesEachStepItsOwnGradient) {
  torch::manual_seed(8);
  auto p = torch::randn({6}).set_requires_grad(true), rp = p.detach().clone().set_requires_grad(true);
  moco::optim::MomentumSgd mine({p}, 0.9, 1e-4);
  torch::optim::SGD reference({rp}, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  mine.set_lr(0.1);
  for (int step = 0; step < 4; ++step) {
    const auto c = torch::randn({6});
    mine.zero_grad();
    reference.zero_grad();
    (p * c).sum().backward();
    (rp * c).sum().backward();
    ASSERT_TRUE(torch::equal(p.grad(), c)) << "step " << step;
    mine.step();
    reference.step();
    ASSERT_TRUE(torch::equal(p, rp)) << "step " << step;
  }
}
