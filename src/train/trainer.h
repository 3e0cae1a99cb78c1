// defines: RunContext (where a run executes), train (the whole run: data, model, optimizer, gradient
// sync, kNN monitor, logs)
#pragma once

#include "dist/process_group.h"
#include "train/config.h"

#include <torch/types.h>

#include <memory>

namespace moco::train {

struct RunContext {
  std::shared_ptr<dist::ProcessGroup> group;  // all ranks of the job (a LocalProcessGroup alone)
  torch::Device device = torch::kCPU;         // this rank's device
};

struct TrainResult {
  double knn_random_init = 0;  // kNN top-1 (%) of the encoder before training
  double knn_trained = 0;      // and after
  int64_t steps = 0;
  double train_seconds = 0;    // rank 0's time in training steps, kNN excluded
};

// Every rank calls it with the same config; rank 0 writes config.yaml and metrics.jsonl.
TrainResult train(const Config& config, const RunContext& context);

}  // namespace moco::train
