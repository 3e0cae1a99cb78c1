// defines: OnlineProbe (a linear classifier trained alongside the method on the detached, pooled
// query features of the labelled train batches, scored on the test split: eval.online_probe)
#pragma once

#include "ckpt/checkpoint.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "dist/process_group.h"
#include "model/backbone.h"
#include "run/config.h"
#include "optim/sgd.h"

#include <torch/types.h>

#include <vector>

namespace moco::run {

// It reads the method's features and never writes them: no gradient reaches the encoder, and it
// draws no random number (zero-initialised), so the method's weights are bit for bit those of a run
// without it. Its replicas agree: each step's gradients are averaged across the ranks.
class OnlineProbe {
 public:
  OnlineProbe(const Config& config, int64_t feature_dim, int64_t num_classes, torch::Device device,
              dist::ProcessGroup& group);
  // One SGD step on this rank's batch: features [n, d] (no graph), labels [n]. Where `trained` (a
  // bool scalar on the device, or undefined: always) is false, the probe keeps its state, as the
  // method did. Collective.
  void train(const torch::Tensor& features, const torch::Tensor& labels, const torch::Tensor& trained);
  // Top-1 (%) on eval.probe_val_size test images of the encoder's backbone features (eval mode; its
  // mode is restored). Collective.
  double score(model::Backbone encoder, const data::Dataset& test, const data::AugmentOptions& normalisation);
  // probe/weight, probe/bias and their momentum buffers, for checkpoints.
  std::vector<ckpt::StateEntry> state_entries() const;

 private:
  const Config& config_;
  dist::ProcessGroup& group_;
  torch::Tensor weight_, bias_;  // [classes, d], [classes]
  optim::MomentumSgd sgd_;
};

}  // namespace moco::run
