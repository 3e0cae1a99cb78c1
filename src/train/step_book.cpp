#include "train/step_book.h"

#include "preempt/preemption.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace moco::train {

StepBook::StepBook(dist::ProcessGroup& group, BadSteps& bad_steps, int64_t at_step, double train_seconds)
    : group_(group),
      bad_steps_(bad_steps),
      records_(group),
      agreements_(group, HostAgreement{at_step, train_seconds, 0, 0}),
      rank0_clock_(train_seconds) {}

void StepBook::after_step(int64_t step, const run::StepOutput& out, double step_seconds, double data_wait_s,
                          int64_t shuffle_bytes, int64_t images) {
  rank0_clock_ += step_seconds;
  records_.record(step, out, step_seconds, shuffle_bytes, images);
  const HostAgreement mine{step, group_.rank() == 0 ? rank0_clock_ : 0.0, preempt::preemption_signal(), data_wait_s};
  if (auto previous = agreements_.start(mine)) records_.agreed(*previous);
}

void StepBook::catch_up() {
  if (auto last = agreements_.complete()) records_.agreed(*last);
  for (const auto& report : records_.drain()) {
    if (!report.trained()) {
      bad_steps_.skipped(report.step, report.skipped_by, report.skip_causes);
    } else {
      bad_steps_.trained();
      if (!std::isfinite(report.loss))
        throw std::runtime_error(fmt::format("step {}: the loss became {}", report.step, report.loss));
    }
    interval.add(report);
    epoch.add(report);
  }
}

}  // namespace moco::train
