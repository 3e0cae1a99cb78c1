// defines: the MoCo math that does not depend on the encoders: contrastive logits and loss (plain, for
// reference, and fused, for training), and the
// ring-buffer enqueue of keys
#pragma once

#include <torch/types.h>

namespace moco::moco_v2 {

// q: [n, dim] queries, k: [n, dim] positive keys, queue: [dim, K] negatives, all L2-normalised.
// Returns [n, 1 + K] = [q.k, q.queue] / temperature; the positive is column 0.
torch::Tensor contrastive_logits(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& queue,
                                 double temperature);

// Cross-entropy of the logits against label 0 (the positive), averaged over the batch.
torch::Tensor contrastive_loss(const torch::Tensor& logits);

struct ContrastiveLoss {
  torch::Tensor loss;           // scalar, with a graph into q only
  torch::Tensor positive_rank;  // [n] int64: how many negatives score above the positive (0: top-1)
};

// contrastive_loss(contrastive_logits(q, k, queue, temperature)) and its gradient with respect to q,
// without the intermediate [n, 1 + K] tensors of that composition (see Note [Fused contrastive
// loss]). k and queue are constants here: neither may require grad.
ContrastiveLoss fused_contrastive_loss(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& queue,
                                       double temperature);

// Writes keys [n, dim] (detached) into columns ptr, ptr+1, ... of queue [dim, K], wrapping past the
// end, and advances ptr (int64 [1], on the queue's device) to the column after them. Needs n <= K.
// With `apply` (a bool scalar on the device) false, queue and ptr keep their values. The column
// indices are computed on the device, so the host never reads the pointer (no sync in the step).
void enqueue_keys(torch::Tensor& queue, torch::Tensor& ptr, const torch::Tensor& keys, const torch::Tensor& apply = {});

}  // namespace moco::moco_v2
