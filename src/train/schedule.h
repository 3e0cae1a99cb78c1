// defines: learning_rate (step and cosine schedules as a function of training progress), schedule_epoch
// (the epoch the schedule is read at: once per epoch or every step, optim.lr_update)
#pragma once

#include "run/config.h"

namespace moco::train {

// The lr = base_lr * batch/256 scaled by the warm-up and the schedule at `epoch` (fractional epochs done; under a
// time budget, the share of the budget spent times train.epochs).
double learning_rate(const run::Config& config, double epoch);

// The epoch learning_rate is read at before a step of the loop's `epoch` (counted from 0), the run
// being at `progress` (RunControl::progress). optim.lr_update=step: progress x train.epochs, a new lr
// every step. epoch: the integer epoch, as main_moco.py's adjust_learning_rate at each epoch's start;
// under train.time_budget_s the whole epochs of the budget spent when they are ahead of the loop's
// (the lr then moves at the first step past each epoch's share of the budget).
double schedule_epoch(const run::Config& config, int64_t epoch, double progress);

}  // namespace moco::train
