// defines: run_lincls (the linear classification protocol of MoCo's main_lincls.py: a linear
// classifier trained on a frozen backbone's features, top-1/top-5 on the val split every epoch, its
// own checkpoints and resume), LinclsResult
#pragma once

#include "lincls/frozen_backbone.h"
#include "run/config.h"
#include "run/config.h"
#include "run/run_context.h"

#include <string>

namespace moco::lincls {

struct LinclsResult {
  double best_top1 = 0, best_top5 = 0;  // top-5 of the best top-1's epoch
  int64_t best_epoch = 0;
  double last_top1 = 0, last_top5 = 0;
  int64_t epochs = 0, steps = 0;
  double train_seconds = 0;    // rank 0's time in training steps (feature extraction and evaluation excluded)
  int64_t sanity_tensors = 0;  // backbone tensors found bitwise those of the source after training
  bool finished = false;       // all lincls.epochs done (not stopped by train.stop_at_step or a signal)
  std::string checkpoint;      // the last one written
};

// main_lincls.py's adjust_learning_rate at `epoch` (counted from 0, as its loop counts): lincls.base_lr
// x lincls.batch_size/256, times lincls.gamma for each milestone reached (epoch >= milestone). With the
// official values: 30 for epochs 0-59, 3 for 60-79, 0.3 for 80-99 (tests/lincls/protocol_test.cpp).
// With lincls.schedule cosine (MoCo v3's main_lincls.py): that lr x (1 + cos(pi epoch / epochs)) / 2.
double learning_rate(const run::Config& config, int64_t epoch);

// train.output_dir may neither lie inside the pre-training run that model.pretrained reads (its
// folder, checkpoints/ or a checkpoint folder) nor hold it. Throws run::ConfigError naming both.
void check_own_output_dir(const run::Config& config, const Backbone& backbone);

// Every rank calls it with the same config and an equal backbone; rank 0 writes config.yaml and
// metrics.jsonl ({"event":"lincls",...} per epoch, {"event":"lincls_result",...} at the end) in
// train.output_dir, checkpoints go to train.output_dir/checkpoints and a run started again resumes
// (train.resume). Training on a new augmented view each step, or (lincls.cached_features) on the
// features of the un-augmented images extracted once. After the last epoch the sanity check
// (Backbone::check_unchanged) must pass, or it throws.
LinclsResult run_lincls(const run::Config& config, const run::RunContext& context, const Backbone& backbone);

}  // namespace moco::lincls
