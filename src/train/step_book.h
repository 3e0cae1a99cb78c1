// defines: StepBook (the host's side of the training steps: each step's records kept on the device,
// its agreement in flight, and the meters they feed, read together where the host waits anyway)
#pragma once

#include "dist/process_group.h"
#include "run/method.h"
#include "train/bad_steps.h"
#include "train/step_agreement.h"
#include "train/step_meter.h"
#include "train/step_records.h"

#include <cstdint>

namespace moco::train {

class StepBook {
 public:
  // `at_step`, `train_seconds`: where a resumed run starts.
  StepBook(dist::ProcessGroup& group, BadSteps& bad_steps, int64_t at_step, double train_seconds);
  // Collective, never waits for the device: step `step` is done (counted from 1).
  void after_step(int64_t step, const run::StepOutput& out, double step_seconds, double data_wait_s,
                  int64_t shuffle_bytes, int64_t images = 0);
  // Collective: one host sync. Completes the agreement in flight and reads every recorded step into
  // the meters; throws on a loss that is not finite and on more than train.max_bad_steps skipped
  // steps in a row.
  void catch_up();
  // The newest agreement every rank has: that of this step after catch_up(), else of the step before.
  const HostAgreement& agreed() const { return agreements_.latest(); }
  StepMeter interval, epoch;

 private:
  dist::ProcessGroup& group_;
  BadSteps& bad_steps_;
  StepRecords records_;
  StepAgreements agreements_;
  double rank0_clock_;  // rank 0's own training clock; the others send 0
};

}  // namespace moco::train
