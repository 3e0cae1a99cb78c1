// defines: RunControl (when a run stops and when it checkpoints between steps: the schedule's steps or
// a time budget, train.stop_at_step, a preemption signal, the checkpoint cadence)
#pragma once

#include "run/checkpointing.h"

#include <cstdint>

namespace moco::run {

class RunControl {
 public:
  // time_budget_s > 0: the run also ends once that much training time is spent (train.time_budget_s);
  // stop_at_step > 0: it ends after that step (train.stop_at_step).
  RunControl(int64_t total_steps, double time_budget_s, int64_t stop_at_step, const Checkpointing& checkpointing)
      : total_steps_(total_steps),
        time_budget_s_(time_budget_s),
        stop_at_step_(stop_at_step),
        checkpointing_(checkpointing) {}

  // In [0, 1]: steps done, or the share of the time budget spent, whichever is ahead. Every rank
  // passes rank 0's clock, so all agree on the lr and on when to stop.
  double progress(int64_t step, double train_seconds) const;
  // The schedule is done, train.stop_at_step is reached, or a rank saw a stop signal.
  bool stops_after(int64_t step, double train_seconds, int stop_signal = 0) const;
  bool stop_at_step_reached(int64_t step) const;
  bool checkpoint_due(int64_t step, double train_seconds) const { return checkpointing_.due(step, train_seconds); }
  int64_t total_steps() const { return total_steps_; }
  bool has_time_budget() const { return time_budget_s_ > 0; }

 private:
  int64_t total_steps_;
  double time_budget_s_;
  int64_t stop_at_step_;
  const Checkpointing& checkpointing_;
};

}  // namespace moco::run
