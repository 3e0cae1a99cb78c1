// defines: the MoCo math that does not depend on the encoders: contrastive logits and loss, and the
// ring-buffer enqueue of keys
#pragma once

#include <torch/types.h>

namespace moco::model {

// q: [n, dim] queries, k: [n, dim] positive keys, queue: [dim, K] negatives, all L2-normalised.
// Returns [n, 1 + K] = [q.k, q.queue] / temperature; the positive is column 0.
torch::Tensor contrastive_logits(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& queue, double temperature);

// Cross-entropy of the logits against label 0 (the positive), averaged over the batch.
torch::Tensor contrastive_loss(const torch::Tensor& logits);

// Writes keys [n, dim] (detached) into columns ptr, ptr+1, ... of queue [dim, K], wrapping past the
// end, and returns the new pointer. Needs n <= K.
int64_t enqueue_keys(torch::Tensor& queue, int64_t ptr, const torch::Tensor& keys);

}  // namespace moco::model
