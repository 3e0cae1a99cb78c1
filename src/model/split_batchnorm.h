// defines: SplitBatchNorm2d, BatchNorm over G contiguous groups of the batch (shuffle-BN on one device)
#pragma once

#include "dist/process_group.h"

#include <torch/nn/cloneable.h>

#include <memory>

namespace moco::model {

// In training mode each of `splits` contiguous slices of the batch is normalised with its own
// statistics, as if each lived on its own device; the running statistics move by the average of the
// groups' updates. With splits = 1, and in eval mode, it is BatchNorm2d (momentum 0.1, eps 1e-5).
// Parameter and buffer names are BatchNorm2d's, so state_dicts stay torchvision-compatible.
// (Not derived from BatchNorm2dImpl: Debian's LibTorch does not export all of its vtable.)
class SplitBatchNorm2dImpl : public torch::nn::Cloneable<SplitBatchNorm2dImpl> {
 public:
  SplitBatchNorm2dImpl(int64_t channels, int64_t splits);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  int64_t splits() const { return splits_; }
  // From now on training normalises with the statistics of every rank of `group` (sync_batch_norm;
  // MoCo v3's SyncBN). Throws std::invalid_argument with several splits.
  void set_group(std::shared_ptr<dist::ProcessGroup> group);

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t channels_, splits_;
  double momentum_ = 0.1, eps_ = 1e-5;
  std::shared_ptr<dist::ProcessGroup> group_;
};
TORCH_MODULE(SplitBatchNorm2d);

}  // namespace moco::model
