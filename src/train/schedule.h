// defines: Schedule (a run's learning-rate schedule: peak, warm-up, step or cosine, when it is read),
// pretraining_schedule and linear_protocol_schedule (the two programs' schedules from their keys),
// learning_rate (the lr at an epoch), schedule_epoch (the epoch the schedule is read at: once per epoch
// or every step)
#pragma once

#include "run/config.h"

#include <vector>

namespace moco::train {

struct Schedule {
  double peak_lr = 0;        // base lr x global batch / 256
  double warmup_epochs = 0;  // linear from 0 to the peak, then the schedule
  run::Schedule kind = run::Schedule::kStep;
  std::vector<double> milestones;  // epochs at which the step schedule multiplies the lr by gamma
  double gamma = 0.1;
  double epochs = 0;  // the run's length: the cosine reaches 0 there
  run::LrUpdate update = run::LrUpdate::kEpoch;
  double time_budget_s = 0;  // > 0: the epochs follow the budget spent (train.time_budget_s)
};

// MoCo pre-training's: optim.* over train.epochs (and train.time_budget_s).
Schedule pretraining_schedule(const run::Config& config);
// The linear protocol's (main_lincls.py's adjust_learning_rate): lincls.* over lincls.epochs, set at
// each epoch's start, no warm-up.
Schedule linear_protocol_schedule(const run::Config& config);

// The lr at `epoch` (fractional epochs done; under a time budget, the share of the budget spent times
// the epochs): the peak scaled by the warm-up and the schedule.
double learning_rate(const Schedule& schedule, double epoch);
// learning_rate(pretraining_schedule(config), epoch).
double learning_rate(const run::Config& config, double epoch);

// The epoch learning_rate is read at before a step of the loop's `epoch` (counted from 0), the run
// being at `progress` (RunControl::progress). LrUpdate::kStep: progress x epochs, a new lr every step.
// kEpoch: the integer epoch, as main_moco.py's adjust_learning_rate at each epoch's start; under a
// time budget the whole epochs of the budget spent when they are ahead of the loop's (the lr then
// moves at the first step past each epoch's share of the budget).
double schedule_epoch(const Schedule& schedule, int64_t epoch, double progress);

}  // namespace moco::train
