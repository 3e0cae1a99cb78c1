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

// fp64 BatchNorm of the global batch (torch's, training mode, from running statistics 0 and
// running_var0), forward
// and backward of L = sum(out * g), and what the bounds below need of it: per channel the standard
// deviation sigma, 1 / sqrt(var + eps), M = max |x| and max |x - mean|, and x normalised.
struct Fp64Reference {
  torch::Tensor out, input_grad, weight_grad, bias_grad, running_mean, running_var;
  torch::Tensor x_hat, invstd, sigma, max_abs, max_deviation;  // x_hat [N, C, ...]; the others [C]
};

std::vector<int64_t> reduced_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// [C] -> the view that broadcasts over [N, C, ...].
torch::Tensor per_channel(const torch::Tensor& t, const torch::Tensor& like) {
  std::vector<int64_t> shape(static_cast<size_t>(like.dim()), 1);
  shape[1] = like.size(1);
  return t.view(shape);
}

Fp64Reference fp64_batch_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& g, double running_var0 = 0.0) {
  const auto xd = x.to(torch::kDouble).requires_grad_();
  const auto wd = weight.to(torch::kDouble).requires_grad_(), bd = bias.to(torch::kDouble).requires_grad_();
  Fp64Reference r;
  r.running_mean = torch::zeros({x.size(1)}, torch::kDouble);
  r.running_var = torch::full({x.size(1)}, running_var0, torch::kDouble);
  r.out = torch::batch_norm(xd, wd, bd, r.running_mean, r.running_var, true, 0.1, 1e-5, false);
  (r.out * g.to(torch::kDouble)).sum().backward();
  r.out = r.out.detach();
  r.input_grad = xd.grad(), r.weight_grad = wd.grad(), r.bias_grad = bd.grad();
  const auto [var, mean] = torch::var_mean(xd.detach(), reduced_dims(x), /*unbiased=*/false);
  r.sigma = var.sqrt();
  r.invstd = torch::rsqrt(var + 1e-5);
  r.x_hat = (xd.detach() - per_channel(mean, x)) * per_channel(r.invstd, x);
  r.max_abs = torch::amax(xd.detach().abs(), reduced_dims(x));
  r.max_deviation = torch::amax((xd.detach() - per_channel(mean, x)).abs(), reduced_dims(x));
  return r;
}

// |got - want| <= bound everywhere; otherwise the worst element's ratio.
::testing::AssertionResult within(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& bound) {
  const auto ratio = (got.to(torch::kDouble) - want).abs() / bound;
  const double worst = ratio.max().item<double>();
  if (worst <= 1.0) return ::testing::AssertionSuccess() << "worst |diff| / bound " << worst;
  return ::testing::AssertionFailure() << "|diff| up to " << worst << " x the bound";
}

// Why the bounds hold (u = 2^-24; per channel M = max |x|, sigma the global batch's standard
// deviation, D = max |x - mean| / sigma, kappa = M / sigma; n a rank's values per channel, W ranks;
// any order of summation, whose rounding is at most (n - 1) u of the sum of absolute values):
// - a rank's mean, from d = x - K (K a value of the data, so |d| <= 2 D sigma) summed in fp32 and
//   rounded to fp32 for the all-gather, is off by E <= u M + 2n u D sigma; its variance,
//   mean(d^2) - mean(d)^2, by <= 12 (n + 1) u D^2 sigma^2;
// - the global mean, combined in fp64 from those and rounded to fp32, is off by <= E + u M: in units
//   of sigma a = 2u kappa + 2n u D; the global variance by <= 12 (n + 1) u D^2 sigma^2 + 4 E sigma +
//   4 E^2 (the means' errors enter the between-rank term sum_r n_r (mean_r - mean)^2 through its cross
//   term, <= 4 E sigma N by Cauchy-Schwarz), i.e. relatively dv <= 12 (n + 1) u D^2 + 4u kappa +
//   8n u D + 4 (u kappa + 2n u D)^2; 1 / sqrt(var + eps) by dv / 2 + u;
// - a normalised value is then off by <= (a + dv / 2 + 4u)(1 + |x_hat|), four fp32 roundings included;
//   the backward combines three such errors and its fp32 sums over n values and W ranks.
// So each result is off by at most rho = u (16 + n + W + 12 kappa + 18 n D + 18 (n + 1) D^2) +
// 6 (u kappa + 2n u D)^2 (three times a normalised value's error, plus the sums' rounding) times the sum
// of the absolute values of its terms, the scale each check names. For mean 100, std 0.01 (kappa ~
// 1e4, the fp32 rounding of the mean itself) rho ~ 1e-2; E[x^2] - E[x]^2 in fp32 there loses the
// variance entirely (x^2 ~ 1e4 carries an error of ~1e-3 per value, ten times sigma^2).
// Checks a rank's share [start, start + share) of the global batch x through SyncBN (got: its output,
// input gradient and running statistics; the parameters' gradients summed over the ranks) against
// want = fp64_batch_norm of x, each within rho times the sum of |terms| its check names; n is a rank's
// values per channel (at most), world the ranks.
void expect_fp64_batch_norm(const BnRun& got, const Fp64Reference& want, const torch::Tensor& x, const torch::Tensor& g,
                            const torch::Tensor& weight, const torch::Tensor& bias, int64_t start, int64_t share,
                            int64_t n, int64_t world, const std::string& where) {
  const double u = std::ldexp(1.0, -24), momentum = 0.1;
  const auto kappa = want.max_abs / want.sigma, spread = want.max_deviation / want.sigma;
  const double nd = static_cast<double>(n);
  const auto rho = u * (16.0 + nd + static_cast<double>(world) + 12.0 * kappa + 18.0 * nd * spread +
                        18.0 * (nd + 1) * spread * spread) +
                   6.0 * (u * kappa + 2.0 * nd * u * spread).square();
  const auto rho_x = per_channel(rho, x), x_hat = want.x_hat.abs(), one = torch::ones_like(x_hat);
  const auto w = per_channel(weight.to(torch::kDouble), x).abs(), b = per_channel(bias.to(torch::kDouble), x).abs();
  const auto gw = (g.to(torch::kDouble) * w).abs();  // the gradient reaching the normalised values
  const auto mean_of = [&x](const torch::Tensor& t) { return per_channel(t.mean(reduced_dims(x)), x); };
  const auto sum_of = [&x](const torch::Tensor& t) { return t.sum(reduced_dims(x)); };
  const auto mine = [&](const torch::Tensor& t) { return t.narrow(0, start, share); };
  EXPECT_TRUE(within(got.out, mine(want.out), mine(rho_x * (w * (one + x_hat) + b)))) << where << ": output";
  const auto input_grad_scale =
      per_channel(want.invstd, x) * (gw + mean_of(gw) + (one + x_hat) * mean_of(gw * (one + x_hat)));
  EXPECT_TRUE(within(got.input_grad, mine(want.input_grad), mine(rho_x * input_grad_scale))) << where << ": dx";
  const auto dy = g.to(torch::kDouble).abs();
  EXPECT_TRUE(within(got.weight_grad, want.weight_grad, rho * sum_of(dy * (one + x_hat)))) << where << ": d weight";
  EXPECT_TRUE(within(got.bias_grad, want.bias_grad, rho * sum_of(dy))) << where << ": d bias";
  EXPECT_TRUE(within(got.running_mean, want.running_mean, rho * (momentum * want.max_abs + want.running_mean.abs())))
      << where << ": running mean";
  EXPECT_TRUE(within(got.running_var, want.running_var, rho * want.running_var.abs())) << where << ": running var";
}

}  // namespace

TEST(SyncBatchNormTest, LocalIsBatchNormWithItsNames) {
  const auto x = sample_input({6, 4}, 0);
  model::SyncBatchNorm bn(4, /*affine=*/true);
  torch::nn::BatchNorm1d plain(4);
  // The local path is torch::batch_norm itself, as BatchNorm1d's: bit for bit.
  EXPECT_TRUE(torch::equal(bn(x), plain(x)));
  EXPECT_TRUE(torch::equal(bn->running_var, plain->running_var));
  model::SyncBatchNorm no_affine(4, /*affine=*/false);
  std::vector<std::string> names;
  for (const auto& item : no_affine->named_parameters()) names.push_back(item.key());
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(no_affine->named_buffers().size(), 3u);
}

// The sync path at world size 1 (a LocalProcessGroup) and torch's BatchNorm (the local path), both
// against fp64 BatchNorm within bounds from fp32 rounding (expect_fp64_batch_norm): the statistics
// from sums, the unbiased running variance, and the gradients through them.
TEST(SyncBatchNormTest, SyncMathAtWorldOneIsBatchNorm) {
  for (const auto& shape : {std::vector<int64_t>{8, 5}, std::vector<int64_t>{4, 3, 5, 5}}) {
    const auto x = sample_input(shape, 1);
    const auto g = torch::randn(shape);
    model::SyncBatchNorm local(shape[1], true), synced(shape[1], true);
    synced->set_group(std::make_shared<dist::LocalProcessGroup>());
    const auto torchs = run_bn(local, x, g), got = run_bn(synced, x, g);
    const auto weight = torch::linspace(0.5, 2.0, shape[1]), bias = torch::linspace(-0.3, 0.3, shape[1]);
    const auto want = fp64_batch_norm(x, weight, bias, g, /*running_var0=*/1.0);
    const int64_t n = x.numel() / shape[1];
    expect_fp64_batch_norm(got, want, x, g, weight, bias, 0, shape[0], n, 1, std::to_string(shape.size()) + "-d sync");
    expect_fp64_batch_norm(torchs, want, x, g, weight, bias, 0, shape[0], n, 1,
                           std::to_string(shape.size()) + "-d torch's");
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
// running statistics, and the parameters' gradients summed over the ranks, are fp64 BatchNorm of the
// global batch within bounds from fp32 rounding (expect_fp64_batch_norm). Also under mpirun (mpi.np2,
// mpi.np4).
TEST(DistSyncBatchNormTest, RanksEqualOneProcessWithTheGlobalBatch) {
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank(), n = 3;
  for (const auto& rest : {std::vector<int64_t>{4}, std::vector<int64_t>{4, 3, 3}}) {
    std::vector<int64_t> global_shape{n * world};
    global_shape.insert(global_shape.end(), rest.begin(), rest.end());
    const auto x = sample_input(global_shape, 2);
    const auto g = torch::randn(global_shape);
    model::SyncBatchNorm ranked(4, true);
    model::use_sync_batchnorm(*ranked, group);
    auto got = run_bn(ranked, x.narrow(0, rank * n, n), g.narrow(0, rank * n, n));
    group->all_reduce(got.weight_grad, dist::ReduceOp::kSum);
    group->all_reduce(got.bias_grad, dist::ReduceOp::kSum);
    const auto weight = torch::linspace(0.5, 2.0, 4), bias = torch::linspace(-0.3, 0.3, 4);
    const auto want = fp64_batch_norm(x, weight, bias, g, /*running_var0=*/1.0);
    expect_fp64_batch_norm(got, want, x, g, weight, bias, rank * n, n, x.numel() / (world * 4), world,
                           std::to_string(rest.size() + 1) + "-d input on rank " + std::to_string(rank));
  }
}

// SyncBN's statistics survive a mean far above the spread (a BatchNorm after a Linear on non-negative
// features): each rank's share (2, 3, 4, ... rows: the counts weigh the ranks' means) normalised
// across the ranks equals fp64 BatchNorm of the global batch within bounds from fp32 rounding, for
// inputs of mean 100 and std 0.01 and of mean 0 and std 1: output, running statistics (the variance
// unbiased by the global count), input gradients, and the parameters' gradients summed over the
// ranks. Also under mpirun (mpi.np2, mpi.np4).

TEST(DistSyncBatchNormTest, LargeMeanStatisticsEqualFp64BatchNormOfTheGlobalBatch) {
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank(), c = 4;
  int64_t start = 0, total = 0;
  for (int64_t r = 0; r < world; ++r) {
    if (r < rank) start += 2 + r;
    total += 2 + r;
  }
  const int64_t share = 2 + rank;
  for (const auto& [mean, std] : {std::pair{100.0, 0.01}, std::pair{0.0, 1.0}}) {
    for (const auto& rest : {std::vector<int64_t>{c}, std::vector<int64_t>{c, 3, 3}}) {
      std::vector<int64_t> global_shape{total};
      global_shape.insert(global_shape.end(), rest.begin(), rest.end());
      torch::manual_seed(5);
      const auto x = (mean + std * torch::randn(global_shape, torch::kDouble)).to(torch::kFloat);
      const auto g = torch::randn(global_shape);
      const auto weight = torch::linspace(0.5, 2.0, c), bias = torch::linspace(-0.3, 0.3, c);
      const auto want = fp64_batch_norm(x, weight, bias, g);

      model::SyncBatchNorm ranked(c, true);
      model::use_sync_batchnorm(*ranked, group);
      {
        torch::NoGradGuard no_grad;
        ranked->weight.copy_(weight);
        ranked->bias.copy_(bias);
        ranked->running_var.zero_();  // so that the check sees the batch's variance, not 0.9 of the initial 1
      }
      const auto input = x.narrow(0, start, share).clone().requires_grad_();
      const auto out = ranked(input);
      (out * g.narrow(0, start, share)).sum().backward();
      auto weight_grad = ranked->weight.grad().clone(), bias_grad = ranked->bias.grad().clone();
      group->all_reduce(weight_grad, dist::ReduceOp::kSum);
      group->all_reduce(bias_grad, dist::ReduceOp::kSum);

      const int64_t n = x.numel() / (total * c) * (2 + world - 1);  // a rank's elements per channel, at most
      const std::string where = std::to_string(rest.size() + 1) + "-d, mean " + std::to_string(mean) + ", std " +
                                std::to_string(std) + ", rank " + std::to_string(rank) + " of " + std::to_string(world);
      expect_fp64_batch_norm({out.detach(), input.grad(), weight_grad, bias_grad, ranked->running_mean.clone(),
                              ranked->running_var.clone()},
                             want, x, g, weight, bias, start, share, n, world, where);
    }
  }
}
