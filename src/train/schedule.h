// defines: learning_rate (step and cosine schedules as a function of training progress)
#pragma once

#include "train/config.h"

namespace moco::train {

// The lr = base_lr * batch/256 scaled by the schedule at `epoch` (fractional epochs done; under a
// time budget, the share of the budget spent times train.epochs).
double learning_rate(const Config& config, double epoch);

}  // namespace moco::train
