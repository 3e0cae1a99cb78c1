// defines: RunControl (when a run stops and what it does between steps: the schedule of
// train.epochs or train.time_budget_s, train.stop_at_step, a preemption signal, the checkpoint
// cadence, the per-epoch kNN)
#pragma once

#include "run/checkpointing.h"
#include "run/config.h"

#include <cstdint>

namespace moco::run {

class RunControl {
 public:
  RunControl(const Config& config, int64_t total_steps, const Checkpointing& checkpointing)
      : config_(config), total_steps_(total_steps), checkpointing_(checkpointing) {}

  // In [0, 1]: steps done, or the share of the time budget spent, whichever is ahead. Every rank
  // passes rank 0's clock, so all agree on the lr and on when to stop.
  double progress(int64_t step, double train_seconds) const;
  // The schedule is done, train.stop_at_step is reached, or a rank saw a stop signal.
  bool stops_after(int64_t step, double train_seconds, int stop_signal = 0) const;
  bool stop_at_step_reached(int64_t step) const;
  bool checkpoint_due(int64_t step, double train_seconds) const { return checkpointing_.due(step, train_seconds); }
  bool knn_due(int64_t epochs_done) const;  // knn.every_epochs
  int64_t total_steps() const { return total_steps_; }

 private:
  const Config& config_;
  int64_t total_steps_;
  const Checkpointing& checkpointing_;
};

}  // namespace moco::run
