#include "run/run_control.h"

#include <algorithm>

namespace moco::run {

double RunControl::progress(int64_t step, double train_seconds) const {
  double p = static_cast<double>(step) / static_cast<double>(total_steps_);
  if (config_.train.time_budget_s > 0) p = std::max(p, train_seconds / config_.train.time_budget_s);
  return p;
}

bool RunControl::stop_at_step_reached(int64_t step) const {
  return config_.train.stop_at_step > 0 && step >= config_.train.stop_at_step;
}

bool RunControl::stops_after(int64_t step, double train_seconds, int stop_signal) const {
  return progress(step, train_seconds) >= 1.0 || stop_at_step_reached(step) || stop_signal != 0;
}

bool RunControl::knn_due(int64_t epochs_done) const {
  return config_.knn.every_epochs > 0 && epochs_done % config_.knn.every_epochs == 0;
}

}  // namespace moco::run
