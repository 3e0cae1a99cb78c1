// defines: LoopJob (what a program does on the run loop besides the method's steps: its schedule, its
// reports and evaluations, what its checkpoints hold beyond the method's), LoopParts (what the loop
// runs on), LoopStatus (where it stands, for the job's reports), LoopEnd, Loop (the run loop every
// program shares: resume, each step's lr, the ranks' agreement, stop and checkpoint decisions, the
// final checkpoint), run_loop (its epochs and steps: Algorithm 1's loop)
#pragma once

#include "data/loader.h"
#include "dist/process_group.h"
#include "metrics/metrics_log.h"
#include "run/batch_source.h"
#include "run/checkpointing.h"
#include "run/clock.h"
#include "run/method.h"
#include "run/run_control.h"
#include "train/bad_steps.h"
#include "train/step_book.h"
#include "train/step_sync_check.h"
#include "train/train_log.h"
#include "train/train_state.h"

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::train {

// What the job's reports read of the loop.
struct LoopStatus {
  int64_t step = 0;          // steps done
  double lr = 0;             // of the last step
  double train_seconds = 0;  // rank 0's, as the ranks agreed
  double progress = 0;       // RunControl::progress
  int64_t bad_steps = 0;     // skipped so far
  int64_t gradient_bytes = 0;
};

// Where the run is at an epoch's end: whether the epoch ran all its batches, and whether the run stops
// here (its schedule done, train.stop_at_step, a signal).
struct EpochEnd {
  int64_t epochs_done = 0;
  bool complete = false;
  bool run_stops = false;
};

// How a run ended: its step, the signal that stopped it (0: none), whether its schedule ran to its end.
struct LoopEnd {
  int64_t steps = 0;
  double train_seconds = 0;
  int preempted_by = 0;
  bool finished = false;
  std::string checkpoint;  // the last one committed
};

class LoopJob {
 public:
  virtual ~LoopJob() = default;
  // The progress its checkpoints hold (TrainState::Layout), and its own tensors beside the method's.
  virtual TrainState::Layout progress_layout() const = 0;
  virtual std::vector<ckpt::StateEntry> state_entries() { return {}; }
  // The lr of the step about to be made, in the loop's `epoch`, the run at `progress`.
  virtual double learning_rate(int64_t epoch, double progress) const = 0;
  // Resumed from checkpoint `dir`: `state` holds the job's counters and values; `epoch` is the
  // meter of the epoch the run resumes in.
  virtual void resumed(const std::string& /*dir*/, TrainState& /*state*/, StepMeter& /*epoch*/) {}
  // After each step, before the ranks agree on it (never waits for the device): `labels` of its batch.
  virtual void after_step(const run::StepOutput& /*out*/, const torch::Tensor& /*labels*/) {}
  // Whether the steps since the last report get one after step `step` (the host then waits); the
  // last step of a run gets one too.
  virtual bool reports_after(int64_t /*step*/) const { return false; }
  virtual void report(const StepMeter& /*interval*/, const LoopStatus& /*status*/) {}
  // After the epoch's loop (every rank's agreement read): its line and evaluations. True: save a
  // checkpoint now.
  virtual bool after_epoch(const EpochEnd& end, StepMeter& epoch, const LoopStatus& status) = 0;
  // Before each save: the job's counters and values into `state` (`epoch`: the current epoch's meter).
  virtual void before_save(TrainState& /*state*/, const StepMeter& /*epoch*/) {}
  // Before the final checkpoint of a run that ran its schedule to the end.
  virtual void before_final_save() {}
  // After the final checkpoint: the lines of a stopped run, or the finished run's results.
  virtual void finish(const LoopEnd& end, const LoopStatus& status) = 0;
};

struct LoopParts {
  run::Method& method;
  dist::ProcessGroup& group;
  run::Checkpointing& checkpointing;
  metrics::MetricsLog* metrics;  // rank 0's, else null
  RunShape shape;
  double time_budget_s = 0;  // train.time_budget_s (pre-training)
  int64_t stop_at_step = 0;  // train.stop_at_step
  int64_t max_bad_steps = 5;
  bool check_step_syncs = false;
  torch::Device device = torch::kCPU;
  // train.resume_on_changed_data: a split of another size makes other batches per epoch, so a resumed
  // step's place in its epoch is counted again from the step (else such a checkpoint is an error).
  bool position_from_step = false;
};

class Loop {
 public:
  // Resumes from the checkpoint, if any. Collective.
  Loop(const LoopParts& parts, LoopJob& job);
  bool done() const { return done_; }
  int64_t step() const { return step_; }             // steps done
  int64_t first_epoch() const { return at_.epoch; }  // the resumed one, or 0
  // The batches at `epoch`'s start, or at the resumed batch of the first epoch.
  void start_epoch(run::BatchSource& batches, int64_t epoch);
  // The next batch (on the device), its wait timed; nullopt at the epoch's end.
  std::optional<data::TwoViewBatch> next_batch(run::BatchSource& batches);
  // The learning rate of the step about to be made; from here to after_step the host must not wait
  // for the device (debug.check_step_syncs).
  double start_step();
  // Collective: the step just made is recorded, agreed on, reported, checked and maybe checkpointed.
  // True when the run stops after it.
  bool after_step(const run::StepOutput& out);
  void after_epoch(int64_t epoch);
  // The final checkpoint, then the job's finish.
  LoopEnd finish();

 private:
  void resume(StepMeter& epoch);
  void place_in_epoch(const std::string& dir);  // at_ from the restored progress, as this run counts it
  void save_checkpoint();
  LoopStatus status() const;

  LoopParts parts_;
  LoopJob& job_;
  TrainState state_;
  const run::RunControl control_;
  BadSteps bad_steps_;
  Progress at_;
  std::optional<StepBook> book_;
  std::optional<StepSyncCheck> no_host_sync_;
  int64_t step_ = 0, epoch_ = 0, batch_in_epoch_ = 0;
  int64_t gradient_bytes_ = 0;  // of the last step
  torch::Tensor labels_;        // of the step's batch
  double lr_ = 0, data_wait_ = 0, train_seconds_ = 0;
  int preempted_by_ = 0;
  run::Clock::time_point step_start_;
  bool done_ = false;
};

// The loop of MoCo's Algorithm 1, and of every program here: for each batch, the lr, one step of the
// method, the loop's chores. A failure names the step it happened in.
LoopEnd run_loop(Loop& loop, run::Method& method, run::BatchSource& batches);

}  // namespace moco::train
