// defines: StepMeter (sums over a run of steps, a log interval or an epoch: steps, time, data wait,
// and loss, the method's scalars and shuffle traffic of the steps that trained)
#pragma once

#include "train/step_records.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace moco::train {

struct StepMeter {
  int64_t steps = 0;          // every step, skipped ones included
  int64_t trained_steps = 0;  // steps not skipped (NaN or Inf queries)
  double seconds = 0, data_wait_s = 0;
  double loss = 0;              // sums over the trained steps
  std::vector<double> scalars;  // of the method's scalars, over the trained steps
  int64_t shuffle_bytes = 0;    // over the trained steps
  double loss_x_images = 0;     // each trained step's loss times its batch's images (this rank's), summed in order

  void add(const StepReport& report) {
    seconds += report.seconds;
    data_wait_s += report.data_wait_s;
    if (report.trained()) {
      scalars.resize(report.scalars.size());
      for (size_t i = 0; i < report.scalars.size(); ++i) scalars[i] += report.scalars[i];
      loss += report.loss;
      loss_x_images += report.loss * static_cast<double>(report.images);
      shuffle_bytes += report.shuffle_bytes;
      ++trained_steps;
    }
    ++steps;
  }
  void reset() { *this = StepMeter(); }
  // Means over the trained steps (NaN when none trained).
  double mean_loss() const { return mean(loss); }
  std::vector<double> mean_scalars() const {
    std::vector<double> means;
    for (double sum : scalars) means.push_back(mean(sum));
    return means;
  }

 private:
  double mean(double sum) const { return trained_steps > 0 ? sum / static_cast<double>(trained_steps) : std::nan(""); }
};

}  // namespace moco::train
