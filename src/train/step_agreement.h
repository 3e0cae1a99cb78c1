// defines: HostAgreement (what every rank agrees on after a step that only the hosts know: rank 0's
// clock, a stop signal any rank saw, the mean data wait), StepAgreements (one small all-reduce per
// step that never holds the step up)
#pragma once

#include "dist/process_group.h"

#include <cstdint>
#include <memory>
#include <optional>

namespace moco::train {

struct HostAgreement {
  int64_t step = 0;          // agreed after this step (0: none yet)
  double train_seconds = 0;  // rank 0's training clock after the step (the others give 0)
  int stop_signal = 0;       // the strongest stop signal any rank had received, else 0
  double data_wait_s = 0;    // seconds waited for the step's batch, mean over ranks
};

// Note [The step's agreement does not block the step]
// Each step starts a non-blocking all-reduce of its own HostAgreement and completes the one the step
// before started, which has long arrived. So the ranks act after step s on step s-1's agreement, all
// of them on the same one: they still take the same lr and stop after the same step, one step after
// a signal was seen. Where the host waits anyway (log steps, checkpoints, the end) complete() makes
// the newest current.
class StepAgreements {
 public:
  explicit StepAgreements(dist::ProcessGroup& group, HostAgreement start = {});
  StepAgreements(const StepAgreements&) = delete;
  StepAgreements& operator=(const StepAgreements&) = delete;
  ~StepAgreements();
  // Collective. Completes the agreement in flight (returned) and starts this rank's side of `mine`.
  std::optional<HostAgreement> start(const HostAgreement& mine);
  // Collective. Waits for the agreement in flight, if any, and returns it.
  std::optional<HostAgreement> complete();
  // The newest completed agreement.
  const HostAgreement& latest() const { return latest_; }

 private:
  dist::ProcessGroup& group_;
  HostAgreement latest_;
  int64_t in_flight_step_ = 0;
  bool shape_agreed_ = false;
  torch::Tensor sums_;
  std::shared_ptr<dist::Work> work_;
};

}  // namespace moco::train
