#include "model/sync_batchnorm.h"

#include "model/split_batchnorm.h"

#include <torch/torch.h>

#include <stdexcept>
#include <vector>

namespace moco::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& tensor, dist::ProcessGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    auto sum = tensor.contiguous().clone();
    group->all_reduce(sum, dist::ReduceOp::kSum);
    return sum;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<dist::ProcessGroup*>(ctx->saved_data["group"].toInt());
    auto grad = grads[0].contiguous().clone();
    group->all_reduce(grad, dist::ReduceOp::kSum);
    return {grad, torch::Tensor()};
  }
};

// The view that broadcasts a [C] vector over input [N, C, ...].
std::vector<int64_t> channel_shape(const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return shape;
}

}  // namespace

torch::Tensor all_reduce_with_gradient(const torch::Tensor& tensor, dist::ProcessGroup& group) {
  return AllReduceSum::apply(tensor, &group);
}

torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              torch::Tensor& running_mean, torch::Tensor& running_var, double momentum, double eps,
                              dist::ProcessGroup& group) {
  const int64_t c = input.size(1);
  std::vector<int64_t> reduced{0};
  for (int64_t d = 2; d < input.dim(); ++d) reduced.push_back(d);
  // Statistics in fp32 at least, whatever the activations' dtype.
  const auto x = input.scalar_type() == torch::kDouble ? input : input.to(torch::kFloat);
  const auto local_count = torch::full({1}, static_cast<double>(input.numel() / c), x.options());
  const auto sums = all_reduce_with_gradient(torch::cat({x.sum(reduced), (x * x).sum(reduced), local_count}), group);
  const auto count = sums.narrow(0, 2 * c, 1).detach();
  const auto mean = sums.narrow(0, 0, c) / count;
  const auto var = sums.narrow(0, c, c) / count - mean * mean;
  const auto shape = channel_shape(input);
  auto out = (x - mean.view(shape)) * torch::rsqrt(var.view(shape) + eps);
  if (weight.defined()) out = out * weight.view(shape) + bias.view(shape);
  {
    torch::NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(mean.detach() * momentum);
    running_var.mul_(1 - momentum).add_(var.detach() * (count / (count - 1)) * momentum);
  }
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
