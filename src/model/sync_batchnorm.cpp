#include "model/sync_batchnorm.h"

#include "model/split_batchnorm.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moco::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dims a BatchNorm reduces over [N, C, ...]: all but the channels.
std::vector<int64_t> reduced_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// The view that broadcasts a [C] vector over input [N, C, ...].
std::vector<int64_t> channel_shape(const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return shape;
}

// This rank's mean and biased variance per channel (fp64 [C] each), from shifted sums: the sums of
// d = x - K and of d^2, K each channel's first value on this rank. K lies within the data, so
// mean(d^2) - mean(d)^2 cancels no more than the spread of the data allows whatever the mean (the
// E[x^2] - E[x]^2 of plain sums loses the variance where |mean| >> std); and two sums cost what plain
// sums do (var_mean's Welford, in double on a CPU, is about ten times slower).
std::pair<torch::Tensor, torch::Tensor> local_statistics(const torch::Tensor& x) {
  const int64_t c = x.size(1);
  if (x.numel() == 0) throw std::invalid_argument("SyncBatchNorm: an empty batch on this rank");
  const double count = static_cast<double>(x.numel() / c);
  const auto shift = x.select(0, 0).reshape({c, -1}).select(1, 0);
  const auto d = x - shift.view(channel_shape(x));
  const auto mean_d = d.sum(reduced_dims(x)).to(torch::kDouble) / count;
  const auto mean_d2 = (d * d).sum(reduced_dims(x)).to(torch::kDouble) / count;
  return {shift.to(torch::kDouble) + mean_d, (mean_d2 - mean_d * mean_d).clamp_min(0)};
}

struct GlobalStatistics {
  torch::Tensor mean, var, count;  // fp64: [C], [C] (biased), [1]
};

// The global batch's mean and variance per channel, as torch's SyncBatchNorm has them: each rank's
// mean and biased variance over its share (local_statistics) gathered with the counts in one
// all-gather (in x's dtype, as torch's), then combined count-weighted in fp64 (as
// batch_norm_gather_stats_with_counts merges Welford statistics): mean = sum n_r mean_r / N,
// M2 = sum n_r var_r + sum n_r (mean_r - mean)^2. No gradient: the backward (NormalizeAcrossRanks) has
// the statistics' part of it in closed form.
GlobalStatistics global_statistics(const torch::Tensor& x, dist::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  const int64_t c = x.size(1), count = x.numel() / c;
  // The count travels in x's dtype: exact in fp32 up to 2^24.
  if (x.scalar_type() == torch::kFloat && count > (int64_t{1} << 24))
    throw std::invalid_argument("SyncBatchNorm: " + std::to_string(count) +
                                " values per channel on one rank, more than fp32 counts exactly (2^24)");
  const auto [mean, var] = local_statistics(x);
  const auto row = torch::cat({mean, var, torch::full({1}, static_cast<double>(count), mean.options())});
  const auto rows = group.all_gather(row.to(x.scalar_type()).unsqueeze(0)).to(torch::kDouble);  // [world, 2C + 1]
  const auto means = rows.narrow(1, 0, c), vars = rows.narrow(1, c, c), counts = rows.narrow(1, 2 * c, 1);
  GlobalStatistics stats;
  stats.count = counts.sum(0);
  stats.mean = (counts * means).sum(0) / stats.count;
  const auto m2 = (counts * vars).sum(0) + (counts * (means - stats.mean).square()).sum(0);
  stats.var = m2 / stats.count;
  return stats;
}

// (x - mean) * invstd with the global statistics, and its gradient as torch's SyncBatchNorm has it:
// dx = invstd (g - mean(g) - (x - mean) invstd^2 mean(g (x - mean))), the two means over the global
// batch from one all-reduce of their sums. mean and invstd are in x's dtype; count is fp64 [1].
struct NormalizeAcrossRanks : torch::autograd::Function<NormalizeAcrossRanks> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& mean,
                               const torch::Tensor& invstd, const torch::Tensor& count, dist::ProcessGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->save_for_backward({x, mean, invstd, count});
    const auto shape = channel_shape(x);
    return (x - mean.view(shape)) * invstd.view(shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<dist::ProcessGroup*>(ctx->saved_data["group"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &mean = saved[1], &invstd = saved[2], &count = saved[3];
    const auto& g = grads[0];
    const int64_t c = x.size(1);
    const auto shape = channel_shape(x);
    const auto x_mu = x - mean.view(shape);
    auto sums = torch::cat({g.sum(reduced_dims(x)), (g * x_mu).sum(reduced_dims(x))});
    group->all_reduce(sums, dist::ReduceOp::kSum);
    const auto means = sums / count.to(sums.scalar_type());
    const auto mean_g = means.narrow(0, 0, c), mean_g_x_mu = means.narrow(0, c, c);
    const auto grad =
        (g - mean_g.view(shape) - x_mu * (invstd * invstd * mean_g_x_mu).view(shape)) * invstd.view(shape);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              torch::Tensor& running_mean, torch::Tensor& running_var, double momentum, double eps,
                              dist::ProcessGroup& group) {
  // Statistics in fp32 at least, whatever the activations' dtype.
  const auto x = input.scalar_type() == torch::kDouble ? input : input.to(torch::kFloat);
  const auto stats = global_statistics(x.detach(), group);
  {
    torch::NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(stats.mean * momentum);
    running_var.mul_(1 - momentum).add_(stats.var * (stats.count / (stats.count - 1)) * momentum);
  }
  const auto mean = stats.mean.to(x.scalar_type()), invstd = torch::rsqrt(stats.var + eps).to(x.scalar_type());
  auto out = NormalizeAcrossRanks::apply(x, mean, invstd, stats.count, &group);
  const auto shape = channel_shape(input);
  if (weight.defined()) out = out * weight.view(shape) + bias.view(shape);
  return out.to(input.scalar_type());
}

SyncBatchNormImpl::SyncBatchNormImpl(int64_t channels, bool affine) : channels_(channels), affine_(affine) { reset(); }

void SyncBatchNormImpl::reset() {
  if (affine_) {
    weight = register_parameter("weight", torch::ones({channels_}));
    bias = register_parameter("bias", torch::zeros({channels_}));
  }
  running_mean = register_buffer("running_mean", torch::zeros({channels_}));
  running_var = register_buffer("running_var", torch::ones({channels_}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  if (!is_training())
    return torch::batch_norm(input, weight, bias, running_mean, running_var, false, momentum_, eps_, true);
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  if (!synced()) return torch::batch_norm(input, weight, bias, running_mean, running_var, true, momentum_, eps_, true);
  return sync_batch_norm(input, weight, bias, running_mean, running_var, momentum_, eps_, *group_);
}

namespace {

bool sync_one(torch::nn::Module& module, const std::shared_ptr<dist::ProcessGroup>& group) {
  if (auto* bn = dynamic_cast<SyncBatchNormImpl*>(&module)) {
    bn->set_group(group);
    return true;
  }
  if (auto* split = dynamic_cast<SplitBatchNorm2dImpl*>(&module)) {
    split->set_group(group);
    return true;
  }
  return false;
}

}  // namespace

// modules(false): a model may convert itself in its constructor, before a shared_ptr holds it.
int64_t use_sync_batchnorm(torch::nn::Module& module, const std::shared_ptr<dist::ProcessGroup>& group) {
  int64_t converted = sync_one(module, group) ? 1 : 0;
  for (const auto& child : module.modules(/*include_self=*/false)) converted += sync_one(*child, group) ? 1 : 0;
  return converted;
}

}  // namespace moco::model
