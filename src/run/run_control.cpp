#include "run/run_control.h"

#include <algorithm>

namespace moco::run {

double RunControl::progress(int64_t step, double train_seconds) const {
  double p = static_cast<double>(step) / static_cast<double>(total_steps_);
  if (time_budget_s_ > 0) p = std::max(p, train_seconds / time_budget_s_);
  return p;
}

bool RunControl::stop_at_step_reached(int64_t step) const { return stop_at_step_ > 0 && step >= stop_at_step_; }

bool RunControl::stops_after(int64_t step, double train_seconds, int stop_signal) const {
  return progress(step, train_seconds) >= 1.0 || stop_at_step_reached(step) || stop_signal != 0;
}

}  // namespace moco::run
