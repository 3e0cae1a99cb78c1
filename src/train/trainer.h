// defines: TrainResult, train (the whole run: data, model, optimizer, gradient
// sync, kNN monitor, logs)
#pragma once

#include "run/config.h"
#include "run/run_context.h"

#include <torch/types.h>

#include <memory>
#include <string>

namespace moco::train {

struct TrainResult {
  double knn_raw_pixels = 0;   // kNN top-1 (%) of the raw normalised pixels (NaN when knn.raw_baseline is off)
  double knn_random_init = 0;  // kNN top-1 (%) of the encoder before training
  double knn_trained = 0;      // and after
  int64_t steps = 0;
  double train_seconds = 0;  // rank 0's time in training steps, kNN excluded
  bool finished = false;     // the schedule ran to its end (not stopped early, not preempted)
  int preempted_by = 0;      // the signal that stopped the run at a step boundary, or 0
  std::string checkpoint;    // the last checkpoint committed
};

// Every rank calls it with the same config; rank 0 writes config.yaml and metrics.jsonl. A SIGUSR1 or
// SIGTERM (preempt/preemption.h) stops every rank after the same step, with a checkpoint.
TrainResult train(const run::Config& config, const run::RunContext& context);

}  // namespace moco::train
