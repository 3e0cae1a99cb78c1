// defines: KeptBuffers, a module's buffers (BatchNorm's running statistics and counts) as they were,
// put back when it goes out of scope
#pragma once

#include <torch/nn/module.h>
#include <torch/torch.h>

#include <vector>

namespace moco::model {

// Around a recomputation in train mode (optim.micro_batch's second pass through the query backbone, a
// checkpointed stage's backward): the first pass moved the running statistics, the second must not
// move them again. The batch statistics the second pass normalises with are the first's (the same
// input), so only the buffers need keeping. A module without buffers (a ViT block) costs nothing.
class KeptBuffers {
 public:
  explicit KeptBuffers(torch::nn::Module& module) : buffers_(module.buffers()) {
    saved_.reserve(buffers_.size());
    for (const auto& b : buffers_) saved_.push_back(b.detach().clone());
  }
  // Through variable_data() (Python's .data): autograd may hold the buffers for a backward still to
  // come (batch_norm saves its running statistics, unread in train mode), whose version check a
  // tracked write would fail.
  ~KeptBuffers() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].variable_data().copy_(saved_[i]);
  }
  KeptBuffers(const KeptBuffers&) = delete;
  KeptBuffers& operator=(const KeptBuffers&) = delete;

 private:
  std::vector<torch::Tensor> buffers_, saved_;
};

}  // namespace moco::model
