// SyncBN (src/model/sync_batchnorm): at world size 1 it is BatchNorm, values, gradients and running
// statistics; under mpirun (mpi.np2, mpi.np4) each rank's share of a batch normalised across the ranks
// equals that share of the batch normalised in one process, forward and backward.
#include "model/split_batchnorm.h"
#include "model/sync_batchnorm.h"
#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace moco;

namespace {

struct BnRun {
  torch::Tensor out, input_grad, weight_grad, bias_grad, running_mean, running_var;
};

// Forward and backward of L = sum(out * g) through `bn` (weight and bias set to non-trivial values).
BnRun run_bn(model::SyncBatchNorm& bn, const torch::Tensor& x, const torch::Tensor& g) {
  {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(torch::linspace(0.5, 2.0, x.size(1)));
    bn->bias.copy_(torch::linspace(-0.3, 0.3, x.size(1)));
  }
  const auto input = x.clone().requires_grad_();
  auto out = bn(input);
  (out * g).sum().backward();
  return {out.detach(),           input.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(),
          bn->running_var.clone()};
}

torch::Tensor sample_input(const std::vector<int64_t>& shape, int seed) {
  torch::manual_seed(seed);
  return torch::randn(shape) * 3 + 2;  // a mean away from 0, so a variance taken carelessly would show
}

}  // namespace

TEST(SyncBatchNormTest, LocalIsBatchNormWithItsNames) {
  const auto x = sample_input({6, 4}, 0);
  model::SyncBatchNorm bn(4, /*affine=*/true);
  torch::nn::BatchNorm1d plain(4);
  EXPECT_TRUE(torch::allclose(bn(x), plain(x), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(bn->running_var, plain->running_var, 1e-6, 1e-6));
  model::SyncBatchNorm no_affine(4, /*affine=*/false);
  std::vector<std::string> names;
  for (const auto& item : no_affine->named_parameters()) names.push_back(item.key());
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(no_affine->named_buffers().size(), 3u);
}

// The sync path at world size 1 (a LocalProcessGroup) against torch's BatchNorm: the statistics from
// sums, the unbiased running variance, and the gradients through them.
TEST(SyncBatchNormTest, SyncMathAtWorldOneIsBatchNorm) {
  for (const auto& shape : {std::vector<int64_t>{8, 5}, std::vector<int64_t>{4, 3, 5, 5}}) {
    const auto x = sample_input(shape, 1);
    const auto g = torch::randn(shape);
    model::SyncBatchNorm local(shape[1], true), synced(shape[1], true);
    synced->set_group(std::make_shared<dist::LocalProcessGroup>());
    const auto want = run_bn(local, x, g), got = run_bn(synced, x, g);
    EXPECT_TRUE(torch::allclose(got.out, want.out, 1e-4, 1e-5)) << shape.size() << "-d";
    EXPECT_TRUE(torch::allclose(got.input_grad, want.input_grad, 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(got.weight_grad, want.weight_grad, 1e-4, 1e-4));
    EXPECT_TRUE(torch::allclose(got.bias_grad, want.bias_grad, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(got.running_mean, want.running_mean, 1e-6, 1e-6));
    EXPECT_TRUE(torch::allclose(got.running_var, want.running_var, 1e-5, 1e-6));
  }
}

TEST(SyncBatchNormTest, ConvertsOnlyOneSplitBatchNorms) {
  auto group = std::make_shared<dist::LocalProcessGroup>();
  torch::nn::Sequential model(model::SplitBatchNorm2d(3, 1), model::SyncBatchNorm(3, false));
  EXPECT_EQ(model::use_sync_batchnorm(*model, group), 2);
  torch::nn::Sequential split(model::SplitBatchNorm2d(3, 2));
  EXPECT_THROW(model::use_sync_batchnorm(*split, group), std::invalid_argument);
}

// Each rank holds n of the global batch's n*world rows: its outputs, its input gradients and the
// running statistics equal those of one process over the whole batch; the parameters' gradients,
// summed over the ranks, equal that process's. Also under mpirun (mpi.np2, mpi.np4).
TEST(DistSyncBatchNormTest, RanksEqualOneProcessWithTheGlobalBatch) {
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank(), n = 3;
  for (const auto& rest : {std::vector<int64_t>{4}, std::vector<int64_t>{4, 3, 3}}) {
    std::vector<int64_t> global_shape{n * world};
    global_shape.insert(global_shape.end(), rest.begin(), rest.end());
    const auto x = sample_input(global_shape, 2);
    const auto g = torch::randn(global_shape);
    model::SyncBatchNorm one_process(4, true), ranked(4, true);
    model::use_sync_batchnorm(*ranked, group);
    const auto want = run_bn(one_process, x, g);
    const auto got = run_bn(ranked, x.narrow(0, rank * n, n), g.narrow(0, rank * n, n));
    const auto where = std::to_string(rest.size() + 1) + "-d input on rank " + std::to_string(rank);
    EXPECT_TRUE(torch::allclose(got.out, want.out.narrow(0, rank * n, n), 1e-4, 1e-5)) << where;
    EXPECT_TRUE(torch::allclose(got.input_grad, want.input_grad.narrow(0, rank * n, n), 1e-4, 1e-5)) << where;
    EXPECT_TRUE(torch::allclose(got.running_mean, want.running_mean, 1e-5, 1e-6)) << where;
    EXPECT_TRUE(torch::allclose(got.running_var, want.running_var, 1e-5, 1e-5)) << where;
    auto weight_grad = got.weight_grad.clone(), bias_grad = got.bias_grad.clone();
    group->all_reduce(weight_grad, dist::ReduceOp::kSum);
    group->all_reduce(bias_grad, dist::ReduceOp::kSum);
    EXPECT_TRUE(torch::allclose(weight_grad, want.weight_grad, 1e-4, 1e-4)) << where;
    EXPECT_TRUE(torch::allclose(bias_grad, want.bias_grad, 1e-4, 1e-5)) << where;
  }
}
