// defines: the training run's log lines and metrics rows: the dry run's plan, the interval's step
// record and line, the end-of-epoch line, the preempted / stopped lines, the final kNN report
#pragma once

#include "data/dataset.h"
#include "run/checkpointing.h"
#include "run/config.h"
#include "metrics/metrics_log.h"
#include "run/method.h"
#include "train/step_meter.h"
#include "train/trainer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moco::train {

// What the lines say about the run as a whole.
struct RunShape {
  int64_t steps_per_epoch = 0, total_steps = 0;
  int world = 1;
};

struct PlanFacts {
  const data::Dataset* train_split = nullptr;
  const data::Dataset* test_split = nullptr;
  int64_t parameters = 0;  // of the query encoder
  std::string plan;        // what the method says of itself (run::MethodFacts::plan)
  std::string device;
};
void log_plan(const run::Config& c, const RunShape& shape, const PlanFacts& facts,
              const run::Checkpointing& checkpointing);

// The metrics row of the steps since the last one (`interval`), `step` being the last of them.
// `scalars`: what the method's StepOutput::scalars hold.
metrics::StepRecord step_record(const run::Config& c, const RunShape& shape, const StepMeter& interval, int64_t step,
                                int64_t bad_steps, double lr, double train_seconds, int64_t grad_bytes_per_step,
                                const std::vector<run::StepScalar>& scalars);
// Its console line; `progress` in [0, 1] gives the ETA.
void log_step(const run::Config& c, const RunShape& shape, const metrics::StepRecord& r, double progress,
              const std::vector<run::StepScalar>& scalars);
// Nothing when no step of the epoch trained.
void log_epoch(const StepMeter& epoch, int64_t epochs_done, int64_t bad_steps, double train_seconds, int64_t bad_files,
               const std::vector<run::StepScalar>& scalars);
void log_preempted(int signal, int64_t step, int64_t total_steps, const std::string& checkpoint);
void log_stopped(int64_t step, int64_t total_steps, const std::string& checkpoint);
// kNN top-1 of raw pixels, random init and trained, with a warning when training has not beaten
// the pixels.
void log_knn_report(const TrainResult& result);

std::string format_duration(double seconds);  // H:MM:SS

}  // namespace moco::train
