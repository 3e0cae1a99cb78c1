// defines: RunChores (what a training run does between the method's steps: resume before the first,
// then each step's agreement across ranks, logs and metrics, replica checks, checkpoint and stop
// decisions, the epoch's line and kNN (the baselines with the first), and at the end the final
// checkpoint and the report), so that the loop in trainer.cpp reads as the algorithm
#pragma once

#include "data/loader.h"
#include "run/clock.h"
#include "run/device_batches.h"
#include "run/initial_weights.h"
#include "run/knn_monitor.h"
#include "run/online_probe.h"
#include "run/run_control.h"
#include "train/bad_steps.h"
#include "train/step_book.h"
#include "train/step_sync_check.h"
#include "train/train_state.h"
#include "train/trainer.h"
#include "train/training_run.h"

#include <optional>

namespace moco::train {

class RunChores {
 public:
  // Resumes `run` from its checkpoint, if any. Collective. The kNN baselines wait for the first kNN
  // evaluation, so that the first step waits for no evaluation (it would grow with the dataset).
  explicit RunChores(TrainingRun& run);
  bool done() const { return done_; }
  int64_t step() const { return step_; }             // steps done
  int64_t first_epoch() const { return at_.epoch; }  // the resumed one, or 0
  // The batches at `epoch`'s start, or at the resumed batch of the first epoch.
  void start_epoch(run::DeviceBatches& batches, int64_t epoch);
  // The next batch (on the device), its wait timed; nullopt at the epoch's end.
  std::optional<data::TwoViewBatch> next_batch(run::DeviceBatches& batches);
  // The learning rate of the step about to be made; from here to after_step the host must not wait
  // for the device (debug.check_step_syncs).
  double start_step();
  // Collective: the step just made is recorded, agreed on, logged, checked and maybe checkpointed.
  // True when the run stops after it.
  bool after_step(const run::StepOutput& out);
  // The epoch's line and, when due, the kNN monitor.
  void after_epoch(int64_t epoch);
  // The final checkpoint, then the preempted or stopped line, or the trained kNN and its report.
  TrainResult finish();

 private:
  void resume();
  void score_baselines();  // once per process, before its first kNN evaluation
  void score_trained(double epoch);
  void report_interval();
  void save_checkpoint();
  void score_probe(double epoch);

  TrainingRun& run_;
  std::optional<run::OnlineProbe> probe_;  // eval.online_probe; before state_, which holds its entries
  TrainState state_;
  // The encoder as initialised, until the random-init baseline is scored (nullopt after).
  std::optional<run::InitialWeights> initial_;
  run::KnnMonitor knn_;
  const run::RunControl control_;
  BadSteps bad_steps_;
  Progress at_;
  TrainResult result_;
  std::optional<StepBook> book_;
  std::optional<StepSyncCheck> no_host_sync_;
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
  int64_t gradient_bytes_ = 0;  // of the last step
  torch::Tensor labels_;        // of the step's batch, for the online probe
  double lr_ = 0, data_wait_ = 0;
  run::Clock::time_point step_start_;
  bool done_ = false;
  bool baselines_scored_ = false;
};

}  // namespace moco::train
