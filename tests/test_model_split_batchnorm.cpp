#include "model/split_batchnorm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using moco::model::SplitBatchNorm2d;

TEST(SplitBatchNormTest, OneSplitIsBatchNorm2d) {
  torch::manual_seed(0);
  const auto x = torch::randn({6, 3, 5, 5}) * 2 + 1;
  SplitBatchNorm2d split(3, 1);
  torch::nn::BatchNorm2d plain(3);
  EXPECT_TRUE(torch::allclose(split(x), plain(x), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(split->running_mean, plain->running_mean, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(split->running_var, plain->running_var, 1e-6, 1e-6));
  split->eval();
  plain->eval();
  EXPECT_TRUE(torch::allclose(split(x), plain(x), 1e-5, 1e-5));
}

TEST(SplitBatchNormTest, EachGroupIsNormalisedAloneAndRunningStatsAverage) {
  torch::manual_seed(1);
  const int64_t groups = 4;
  // Groups with different means and scales, so that mixing them would show.
  auto x = torch::randn({8, 3, 4, 4});
  x = x * torch::arange(1, 9).view({8, 1, 1, 1}) + torch::arange(8).view({8, 1, 1, 1});
  SplitBatchNorm2d split(3, groups);
  {
    torch::NoGradGuard no_grad;
    split->weight.copy_(torch::tensor({0.5f, 1.0f, 2.0f}));
    split->bias.copy_(torch::tensor({0.1f, -0.2f, 0.3f}));
  }
  const auto out = split(x);
  auto mean_sum = torch::zeros({3}), var_sum = torch::zeros({3});
  for (int64_t g = 0; g < groups; ++g) {
    torch::nn::BatchNorm2d alone(3);
    {
      torch::NoGradGuard no_grad;
      alone->weight.copy_(split->weight);
      alone->bias.copy_(split->bias);
    }
    const auto part = x.narrow(0, g * 2, 2);
    EXPECT_TRUE(torch::allclose(out.narrow(0, g * 2, 2), alone(part), 1e-4, 1e-4)) << "group " << g;
    mean_sum += alone->running_mean;
    var_sum += alone->running_var;
  }
  EXPECT_TRUE(torch::allclose(split->running_mean, mean_sum / groups, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(split->running_var, var_sum / groups, 1e-5, 1e-5));
  EXPECT_EQ(split->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_THROW(split(torch::randn({6, 3, 4, 4})), std::invalid_argument);
}

TEST(SplitBatchNormTest, GradientsFlowToWeightAndBias) {
  SplitBatchNorm2d split(2, 2);
  split(torch::randn({4, 2, 3, 3})).pow(2).sum().backward();
  EXPECT_TRUE(split->weight.grad().defined());
  EXPECT_GT(split->bias.grad().abs().sum().item<double>(), 0);
}
