#include "model/contrastive.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace moco::model {

torch::Tensor contrastive_logits(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& queue, double temperature) {
  auto l_pos = (q * k).sum(1, /*keepdim=*/true);
  auto l_neg = torch::mm(q, queue);
  return torch::cat({l_pos, l_neg}, 1) / temperature;
}

torch::Tensor contrastive_loss(const torch::Tensor& logits) {
  auto labels = torch::zeros({logits.size(0)}, logits.options().dtype(torch::kLong));
  return torch::nn::functional::cross_entropy(logits, labels);
}

int64_t enqueue_keys(torch::Tensor& queue, int64_t ptr, const torch::Tensor& keys) {
  torch::NoGradGuard no_grad;
  const int64_t size = queue.size(1);
  const int64_t n = keys.size(0);
  if (n > size) {
    throw std::invalid_argument("cannot enqueue " + std::to_string(n) + " keys into a queue of " +
                                std::to_string(size) + ": the global batch must not exceed moco.queue_size");
  }
  auto columns = keys.detach().t();
  const int64_t head = std::min(n, size - ptr);  // the part that fits before the end
  queue.narrow(1, ptr, head).copy_(columns.narrow(1, 0, head));
  if (head < n) queue.narrow(1, 0, n - head).copy_(columns.narrow(1, head, n - head));
  return (ptr + n) % size;
}

}  // namespace moco::model
