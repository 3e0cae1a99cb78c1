// defines: sync_batch_norm (training-mode BatchNorm over the batch of every rank), SyncBatchNorm (BatchNorm1d/2d that
// normalises across ranks once given a group), use_sync_batchnorm (converts a model's BatchNorms, as
// torch.nn.SyncBatchNorm.convert_sync_batchnorm)
#pragma once

#include "dist/process_group.h"

#include <torch/nn/cloneable.h>

#include <memory>

namespace moco::model {

// Training-mode BatchNorm of input [N, C, ...] with the mean and biased variance of every rank's batch,
// as torch's SyncBatchNorm: each rank's mean and variance (not sums of squares, which lose the variance
// where |mean| >> std) gathered with its count in one all-gather and combined count-weighted in fp64;
// the running statistics move by the global ones (the variance unbiased by the global count), so they
// agree on every rank. weight and bias may be undefined (affine off). The backward reaches every
// rank's input through one all-reduce of two gradient sums per channel.
torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                              torch::Tensor& running_mean, torch::Tensor& running_var, double momentum, double eps,
                              dist::ProcessGroup& group);

// BatchNorm over [N, C] or [N, C, H, W] with BatchNorm1d's names and defaults (momentum 0.1, eps 1e-5;
// no weight and bias when affine is off). Local until use_sync_batchnorm gives it a group (at world
// size 1 too, to rehearse the collectives); in eval mode always the running statistics.
// (Not derived from BatchNormImpl: Debian's LibTorch does not export all of its vtable.)
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(int64_t channels, bool affine);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);
  void set_group(std::shared_ptr<dist::ProcessGroup> group) { group_ = std::move(group); }
  bool synced() const { return group_ != nullptr; }

  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t channels_;
  bool affine_;
  double momentum_ = 0.1, eps_ = 1e-5;
  std::shared_ptr<dist::ProcessGroup> group_;
};
TORCH_MODULE(SyncBatchNorm);

// Every BatchNorm of `module` (SyncBatchNorm, and SplitBatchNorm2d of one split) normalises across the
// ranks of `group` from now on (sync_batch_norm, also at world size 1). Throws std::invalid_argument for a
// SplitBatchNorm2d of several splits (shuffle-BN's groups are the opposite of one global batch). Returns how many it
// converted.
int64_t use_sync_batchnorm(torch::nn::Module& module, const std::shared_ptr<dist::ProcessGroup>& group);

}  // namespace moco::model
