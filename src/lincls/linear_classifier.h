// defines: LinearClassifier (the linear protocol's fc layer over frozen features: optional per-
// dimension standardisation, SGD with momentum, gradients averaged over the ranks), TopK,
// topk_correct and evaluate_classifier (top-1/top-5 over a split, shared by the ranks)
#pragma once

#include "ckpt/checkpoint.h"
#include "dist/process_group.h"
#include "dist/reducer.h"
#include "optim/sgd.h"

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <memory>
#include <vector>

namespace moco::lincls {

class LinearClassifier {
 public:
  // fc weights drawn from normal(0, 0.01) with `seed`, bias 0 (the official re-initialisation), then
  // rank 0's copy broadcast to every rank.
  LinearClassifier(int64_t in_features, int64_t num_classes, double momentum, double weight_decay,
                   std::shared_ptr<dist::ProcessGroup> group, uint64_t seed, torch::Device device);

  // Features are mapped to (f - mean) / std before fc; mean 0, std 1 until set.
  void set_standardization(const torch::Tensor& mean, const torch::Tensor& std);
  // Logits [n, classes] of features [n, in_features] (any device), without a graph.
  torch::Tensor predict(const torch::Tensor& features);
  // One SGD step on this rank's share of a global batch (cross-entropy, mean over the share; the
  // gradients are averaged over the ranks, so the step is that of the global batch). Returns this
  // rank's loss, a scalar on the device (nothing read on the host).
  torch::Tensor step(const torch::Tensor& features, const torch::Tensor& labels, double lr);

  // What a checkpoint holds: lincls/fc.weight, lincls/fc.bias, lincls/feature_mean,
  // lincls/feature_std, optimizer/momentum_buffer/fc.{weight,bias}. Restored in place.
  std::vector<ckpt::StateEntry> state_entries();
  torch::nn::Linear& fc() { return fc_; }

 private:
  torch::Tensor standardize(const torch::Tensor& features) const;
  torch::nn::Linear fc_{nullptr};
  torch::Tensor mean_, std_;
  std::unique_ptr<optim::MomentumSgd> sgd_;
  std::unique_ptr<dist::GradientReducer> reducer_;
};

struct TopK {
  int64_t correct1 = 0, correct5 = 0, total = 0;
  double top1() const { return total > 0 ? 100.0 * static_cast<double>(correct1) / static_cast<double>(total) : 0.0; }
  double top5() const { return total > 0 ? 100.0 * static_cast<double>(correct5) / static_cast<double>(total) : 0.0; }
};

// Samples whose label has the highest logit, and one of the min(5, classes) highest.
TopK topk_correct(const torch::Tensor& logits, const torch::Tensor& labels);

// Top-1/top-5 of the classifier over features [N, d] / labels [N] that every rank holds: each rank
// scores a contiguous shard (in chunks of batch_size) and the counts are summed. Collective.
TopK evaluate_classifier(LinearClassifier& classifier, const torch::Tensor& features, const torch::Tensor& labels,
                         dist::ProcessGroup& group, int64_t batch_size);

}  // namespace moco::lincls
