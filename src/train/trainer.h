// defines: train (the whole run: data, model, optimizer, kNN monitor, logs)
#pragma once

#include "dist/process_group.h"
#include "train/config.h"

#include <memory>

namespace moco::train {

struct TrainResult {
  double knn_random_init = 0;  // kNN top-1 (%) of the encoder before training
  double knn_trained = 0;      // and after
  int64_t steps = 0;
  double train_seconds = 0;    // time in training steps, kNN excluded
};

TrainResult train(const Config& config, std::shared_ptr<dist::ProcessGroup> group);

}  // namespace moco::train
