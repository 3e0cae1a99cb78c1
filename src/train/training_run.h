// defines: TrainingRun (what a training run is made of, built in the order that fixes every random
// draw and collective: threads and seed, the checkpoint to resume from, the output folder, the data,
// the method, the loader and its batches onto the device), RunShape's steps, uint8_views (which views
// the loader makes)
#pragma once

#include "data/loader.h"
#include "metrics/metrics_log.h"
#include "run/checkpointing.h"
#include "run/config.h"
#include "run/device_batches.h"
#include "run/method.h"
#include "run/run_context.h"
#include "run/setup.h"
#include "train/train_log.h"

#include <memory>
#include <optional>

namespace moco::train {

// Whether the loader leaves the views as uint8 pixels, normalised on the device (run::DeviceBatches):
// on CUDA (4x fewer bytes to copy, the copy overlapping the step), for every recipe but simple, which
// makes its views in float. The CPU keeps normalised floats from the loader.
bool uint8_views(torch::Device device, data::Recipe recipe);

struct TrainingRun {
  TrainingRun(const run::Config& config, const run::RunContext& context);
  void log_plan();  // the dry run's report

  const run::Config& config;
  const run::RunContext& context;
  dist::ProcessGroup& group;
  const int rank, world, threads;
  run::Checkpointing checkpointing;  // what to resume from, checked before any data is loaded
  const run::Splits splits;
  std::unique_ptr<run::Method> method;
  data::TwoViewLoader loader;
  run::DeviceBatches batches;                  // the loader's batches onto the device
  RunShape shape;                              // a split smaller than one batch: refused here
  std::optional<metrics::MetricsLog> metrics;  // rank 0's; opened once the config and the data passed
};

}  // namespace moco::train
