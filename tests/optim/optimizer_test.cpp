// LARS's and AdamW's step(apply) (src/optim): a step skipped on the device leaves parameters and
// state (AdamW's step count included) as they were; an applied one is the plain update bit for bit,
// AdamW's LibTorch's torch::optim::AdamW's (the same formulas, its bias corrections from the host);
// Optimizer's gradient check and model::holds_nonfinite over many tensors.
#include "model/nonfinite.h"
#include "optim/adamw.h"
#include "optim/lars.h"
#include "optim/optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace moco;

namespace {

// A matrix, a vector and a 4-d weight, each as two identical leaf copies.
struct TwinParameters {
  std::vector<torch::Tensor> a, b;
};

TwinParameters twin_parameters(uint64_t seed) {
  torch::manual_seed(seed);
  TwinParameters t;
  for (auto shape : {std::vector<int64_t>{4, 3}, std::vector<int64_t>{7}, std::vector<int64_t>{2, 3, 3, 3}}) {
    const auto p = torch::randn(shape);
    t.a.push_back(p.clone().set_requires_grad(true));
    t.b.push_back(p.clone().set_requires_grad(true));
  }
  return t;
}

void give_gradients(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    const auto grad = torch::randn(a[i].sizes());
    a[i].mutable_grad() = grad.clone();
    b[i].mutable_grad() = grad.clone();
  }
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

void expect_bitwise(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << what << " " << i;
}

void spoil_gradients(const std::vector<torch::Tensor>& params) {
  params[0].mutable_grad()[1][2] = std::nan("");
  params[2].mutable_grad()[0][0][0][0] = std::numeric_limits<float>::infinity();
}

}  // namespace

// AdamW's update as LibTorch's AdamW takes it (lr changing between steps, decoupled decay), bit for
// bit, although its step count and bias corrections live on the device.
TEST(AdamWTest, StepsBitwiseLikeLibTorchsAdamW) {
  auto p = twin_parameters(5);
  torch::optim::AdamW reference(p.a, torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
  optim::AdamW mine(p.b, 0.1);
  for (int step = 0; step < 12; ++step) {
    const double lr = 1e-3 / (1 + step);
    for (auto& g : reference.param_groups()) g.options().set_lr(lr);
    mine.set_lr(lr);
    give_gradients(p.a, p.b);
    reference.step();
    mine.step(torch::tensor(true));
    for (size_t i = 0; i < p.a.size(); ++i)
      ASSERT_TRUE(torch::equal(p.a[i], p.b[i])) << "step " << step << " tensor " << i;
  }
  EXPECT_EQ(mine.steps().item<int64_t>(), 12);
}

// A step not applied (NaN and Inf gradients) changes no parameter, moment or step count; the next
// applied step is then the reference's step 2 (bias corrections at t = 2, not 3), bit for bit.
TEST(AdamWTest, AStepNotAppliedChangesNothingNotEvenTheStepCount) {
  auto p = twin_parameters(6);
  torch::optim::AdamW reference(p.a, torch::optim::AdamWOptions(1e-2).weight_decay(0.05));
  optim::AdamW mine(p.b, 0.05);
  mine.set_lr(1e-2);
  give_gradients(p.a, p.b);
  reference.step();
  mine.step();
  const auto params = copies(p.b), m = copies(mine.exp_avg()), v = copies(mine.exp_avg_sq());
  const auto steps = mine.steps().clone();
  give_gradients(p.b, p.b);
  spoil_gradients(p.b);
  mine.step(torch::tensor(false));
  expect_bitwise(copies(p.b), params, "parameter");
  expect_bitwise(mine.exp_avg(), m, "exp_avg");
  expect_bitwise(mine.exp_avg_sq(), v, "exp_avg_sq");
  EXPECT_TRUE(torch::equal(mine.steps(), steps));
  EXPECT_EQ(mine.steps().item<int64_t>(), 1);
  give_gradients(p.a, p.b);
  reference.step();
  mine.step(torch::tensor(true));
  expect_bitwise(copies(p.b), copies(p.a), "parameter after the skip");
  EXPECT_EQ(mine.steps().item<int64_t>(), 2);
}

// LARS with apply true is its plain step bit for bit (two steps: the buffer carries); apply false with
// NaN and Inf gradients changes no parameter and no buffer.
TEST(LarsTest, AStepNotAppliedChangesNothingAndAnAppliedOneIsThePlainStep) {
  auto p = twin_parameters(7);
  optim::Lars masked(p.a, 0.9, 1e-4), plain(p.b, 0.9, 1e-4);
  masked.set_lr(0.3);
  plain.set_lr(0.3);
  for (int step = 0; step < 2; ++step) {
    give_gradients(p.a, p.b);
    masked.step(torch::tensor(true));
    plain.step();
    expect_bitwise(copies(p.a), copies(p.b), "parameter");
    expect_bitwise(masked.momentum_buffers(), plain.momentum_buffers(), "buffer");
  }
  const auto params = copies(p.a), buffers = copies(masked.momentum_buffers());
  give_gradients(p.a, p.b);
  spoil_gradients(p.a);
  masked.step(torch::tensor(false));
  expect_bitwise(copies(p.a), params, "parameter");
  expect_bitwise(masked.momentum_buffers(), buffers, "buffer");
}

// The optimizer a method holds, whichever its algorithm: its step(apply) reaches the algorithm, and
// its gradient check sees NaN or Inf in any gradient (not in a parameter without one).
TEST(OptimizerTest, EachAlgorithmSkipsAndChecksItsGradients) {
  for (const auto algorithm : {optim::Algorithm::kSgd, optim::Algorithm::kLars, optim::Algorithm::kAdamw}) {
    auto p = twin_parameters(8);
    auto unused = torch::randn({3}).set_requires_grad(true);
    auto params = p.a;
    params.push_back(unused);
    optim::Optimizer optimizer(algorithm, params, 0.9, 1e-4);
    optimizer.set_lr(0.1);
    give_gradients(p.a, p.b);
    EXPECT_FALSE(optimizer.nonfinite_gradients().item<bool>());
    const auto before = copies(p.a);
    p.a[1].mutable_grad()[3] = -std::numeric_limits<float>::infinity();
    EXPECT_TRUE(optimizer.nonfinite_gradients().item<bool>());
    optimizer.step(torch::tensor(false));
    expect_bitwise(copies(p.a), before, "parameter");
    EXPECT_FALSE(optimizer.gradients()[3].defined());
    p.a[1].mutable_grad()[3] = 0.5;
    optimizer.step(torch::tensor(true));
    EXPECT_FALSE(torch::equal(p.a[0], before[0])) << "an applied step moved nothing";
  }
}

// Over many tensors: NaN or Inf in any one, whatever its dtype; undefined and empty tensors hold none.
TEST(NonfiniteTest, ManyTensorsHoldNonfiniteWhereAnyDoes) {
  const auto finite = std::vector<torch::Tensor>{torch::randn({3, 4}), torch::Tensor(), torch::empty({0}),
                                                 torch::full({2}, 3e38f), torch::randn({5}, torch::kDouble)};
  EXPECT_FALSE(model::holds_nonfinite(finite).item<bool>());
  EXPECT_FALSE(model::holds_nonfinite(std::vector<torch::Tensor>{}).item<bool>());
  EXPECT_FALSE(model::holds_nonfinite(std::vector<torch::Tensor>{torch::Tensor()}).item<bool>());
  for (size_t at : {0, 3, 4}) {
    for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
      auto tensors = finite;
      tensors[at] = tensors[at].clone();
      tensors[at].view({-1})[1] = bad;
      EXPECT_TRUE(model::holds_nonfinite(tensors).item<bool>()) << bad << " in tensor " << at;
    }
  }
  auto half = finite;
  half.push_back(torch::tensor({1.0, -std::numeric_limits<double>::infinity()}).to(torch::kBFloat16));
  EXPECT_TRUE(model::holds_nonfinite(half).item<bool>());
}
