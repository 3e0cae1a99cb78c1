// defines: StepMeter (sums over a run of steps, a log interval or an epoch: steps, time, data wait,
// and loss, accuracies and shuffle traffic of the steps that trained)
#pragma once

#include "train/step_records.h"

#include <cmath>
#include <cstdint>

namespace moco::train {

struct StepMeter {
  int64_t steps = 0;          // every step, skipped ones included
  int64_t trained_steps = 0;  // steps not skipped (NaN or Inf queries)
  double seconds = 0, data_wait_s = 0;
  double loss = 0, acc1 = 0, acc5 = 0;  // sums over the trained steps
  int64_t shuffle_bytes = 0;            // over the trained steps

  void add(const StepReport& report) {
    seconds += report.seconds;
    data_wait_s += report.data_wait_s;
    if (report.trained()) {
      acc1 += report.acc1;
      acc5 += report.acc5;
      loss += report.loss;
      shuffle_bytes += report.shuffle_bytes;
      ++trained_steps;
    }
    ++steps;
  }
  void reset() { *this = StepMeter(); }
  // Means over the trained steps (NaN when none trained).
  double mean_loss() const { return mean(loss); }
  double mean_acc1() const { return mean(acc1); }
  double mean_acc5() const { return mean(acc5); }

 private:
  double mean(double sum) const { return trained_steps > 0 ? sum / static_cast<double>(trained_steps) : std::nan(""); }
};

}  // namespace moco::train
