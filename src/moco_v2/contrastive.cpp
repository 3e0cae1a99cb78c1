#include "moco_v2/contrastive.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace moco::moco_v2 {

torch::Tensor contrastive_logits(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& queue,
                                 double temperature) {
  auto l_pos = (q * k).sum(1, /*keepdim=*/true);
  auto l_neg = torch::mm(q, queue);
  return torch::cat({l_pos, l_neg}, 1) / temperature;
}

torch::Tensor contrastive_loss(const torch::Tensor& logits) {
  auto labels = torch::zeros({logits.size(0)}, logits.options().dtype(torch::kLong));
  return torch::nn::functional::cross_entropy(logits, labels);
}

// Note [Fused contrastive loss]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The plain composition (cat, divide by T, log_softmax, NLL, then each one's backward) walks the
// [n, 1 + K] logits about ten times per step: with K = 16384 and n = 256 that is 16 MiB a walk, and
// on CPU it cost as much as 8% of a resnet_tiny step, more than the two matrix products it wraps.
// Here: q is scaled by 1/T first (n x dim, not n x K), the negatives' products are written by GEMM
// straight into columns 1.. of the logits, and one log_softmax gives both the loss and, exponentiated
// in place, the gradient dL/dlogits = (softmax - onehot(0)) / n, which the second GEMM turns into
// dL/dq at once. So the gradient is made in the forward and backward only scales it: nothing of
// size K outlives the forward, the queue is not kept (the caller may enqueue into it before
// backward) and no log-probabilities are saved.
// The loss is -mean(log p_0) from log_softmax, the cross-entropy's own value (a softmax alone would
// lose it where p_0 underflows: a positive far below its negatives at a low temperature).
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class FusedContrastiveLoss : public torch::autograd::Function<FusedContrastiveLoss> {
 public:
  // Returns {loss, positive_rank}; the rank is not differentiable.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& queue, double temperature) {
    const double inv_t = 1.0 / temperature;
    const auto q_t = q * inv_t;
    const int64_t n = q.size(0), negatives = queue.size(1);
    torch::Tensor positive_rank, p;
    {
      auto logits = torch::empty({n, 1 + negatives}, q.options());
      auto l_neg = logits.narrow(1, 1, negatives);  // row stride 1 + K: GEMM writes it in place (ldc)
      torch::mm_out(l_neg, q_t, queue);
      const auto l_pos = logits.narrow(1, 0, 1);
      l_pos.copy_((q_t * k).sum(1, /*keepdim=*/true));
      // Counted in int32: summing bools into int64 takes LibTorch's slow path (9x slower here).
      positive_rank = l_neg.gt(l_pos).sum(1, /*keepdim=*/false, torch::kInt).to(torch::kLong);
      p = torch::log_softmax(logits, 1);
    }  // the logits (16 MiB at K = 16384, n = 256) freed before the second GEMM's output is made
    const auto loss = -p.select(1, 0).mean();
    p.exp_().select(1, 0).sub_(1.0);  // softmax - onehot(0)
    auto d_q = torch::mm(p.narrow(1, 1, negatives), queue.t());
    d_q.addcmul_(p.narrow(1, 0, 1).expand_as(k), k);
    d_q.mul_(inv_t / static_cast<double>(n));
    ctx->save_for_backward({d_q});
    ctx->mark_non_differentiable({positive_rank});
    return {loss, positive_rank};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {ctx->get_saved_variables()[0] * grad_outputs[0], torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ContrastiveLoss fused_contrastive_loss(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& queue,
                                       double temperature) {
  if (k.requires_grad() || queue.requires_grad())
    throw std::invalid_argument("fused_contrastive_loss: k and the queue are constants; neither may require grad");
  auto out = FusedContrastiveLoss::apply(q, k, queue, temperature);
  return {out[0], out[1]};
}

void enqueue_keys(torch::Tensor& queue, torch::Tensor& ptr, const torch::Tensor& keys, const torch::Tensor& apply) {
  torch::NoGradGuard no_grad;
  const int64_t size = queue.size(1);
  const int64_t n = keys.size(0);
  if (n > size) {
    throw std::invalid_argument("cannot enqueue " + std::to_string(n) + " keys into a queue of " +
                                std::to_string(size) + ": the global batch must not exceed moco.queue_size");
  }
  const auto columns = torch::arange(n, ptr.options()).add_(ptr).remainder_(size);
  auto keys_by_column = keys.detach().t().to(queue.scalar_type());
  if (apply.defined()) keys_by_column = torch::where(apply, keys_by_column, queue.index_select(1, columns));
  queue.index_copy_(1, columns, keys_by_column);
  auto next = (ptr + n).remainder_(size);
  ptr.copy_(apply.defined() ? torch::where(apply, next, ptr) : next);
}

}  // namespace moco::moco_v2
