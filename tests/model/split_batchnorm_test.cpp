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

// Against the hand-derived gradients of L = sum(out * g): dL/dbias_c = sum of g over channel c, and
// dL/dweight_c = sum of g * xhat over channel c, where xhat is x normalised by its own group's
// statistics. (The old loss, sum(out^2), has a bias gradient of exactly 0 at bias 0.)
TEST(SplitBatchNormTest, GradientsOfWeightAndBiasEqualTheHandComputation) {
  torch::manual_seed(2);
  const int64_t groups = 2, n = 4, c = 2;
  SplitBatchNorm2d split(c, groups);
  {
    torch::NoGradGuard no_grad;
    split->weight.copy_(torch::tensor({1.5f, -0.5f}));
    split->bias.copy_(torch::tensor({0.2f, 0.0f}));
  }
  const auto x = torch::randn({n, c, 3, 3}) * torch::arange(1, n + 1).view({n, 1, 1, 1});
  const auto g = torch::randn({n, c, 3, 3});
  (split(x) * g).sum().backward();
  auto xhat = torch::empty_like(x);
  for (int64_t j = 0; j < groups; ++j) {
    const auto part = x.narrow(0, j * n / groups, n / groups);
    const auto mean = part.mean({0, 2, 3}, /*keepdim=*/true);
    const auto var = part.var({0, 2, 3}, /*unbiased=*/false, /*keepdim=*/true);
    xhat.narrow(0, j * n / groups, n / groups).copy_((part - mean) / torch::sqrt(var + 1e-5));
  }
  const auto expected_bias = g.sum({0, 2, 3});
  const auto expected_weight = (g * xhat).sum({0, 2, 3});
  ASSERT_TRUE(split->bias.grad().defined());
  ASSERT_TRUE(split->weight.grad().defined());
  EXPECT_TRUE(torch::allclose(split->bias.grad(), expected_bias, 1e-4, 1e-4)) << split->bias.grad() << expected_bias;
  EXPECT_TRUE(torch::allclose(split->weight.grad(), expected_weight, 1e-4, 1e-4))
      << split->weight.grad() << expected_weight;
  EXPECT_GT(expected_bias.abs().min().item<double>(), 1e-3);  // the check is not 0 == 0
}
