// defines: StepReport (one step as every rank agrees on it), StepRecords (each step's loss,
// accuracies and skip flags kept on the device until the host reads them all at once)
#pragma once

#include "dist/process_group.h"
#include "run/method.h"
#include "train/step_agreement.h"

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace moco::train {

struct StepReport {
  int64_t step = 0;
  double seconds = 0;                // this rank's time for the step (on CUDA, mostly the time to queue it)
  double data_wait_s = 0;            // mean over ranks
  int64_t shuffle_bytes = 0;         // sent by this rank for shuffle-BN
  std::vector<int> skipped_by;       // the ranks whose step held NaN or Inf; empty when the step trained
  std::vector<int32_t> skip_causes;  // for each of skipped_by: its model::NonfiniteCause bits
  double loss = 0;                   // mean over ranks; only for a step that trained
  std::vector<double> scalars;       // the method's (run::Method::step_scalars), means over ranks
  int64_t images = 0;                // in this rank's batch
  bool trained() const { return skipped_by.empty(); }
};

// Reading a step's loss on the host would wait for the step's GPU work; so the records stay on the
// device, one small row per step, and the host reads them together (one all-reduce, one copy: one
// host sync) where it reports anyway.
class StepRecords {
 public:
  explicit StepRecords(dist::ProcessGroup& group) : group_(group) {}
  // The step's device values (nothing is read) and this rank's host values.
  void record(int64_t step, const run::StepOutput& out, double seconds, int64_t shuffle_bytes, int64_t images = 0);
  // A completed agreement: its step's data wait.
  void agreed(const HostAgreement& agreement);
  bool empty() const { return pending_.empty(); }
  // Collective: every recorded step, in order, and forgets them. Each needs its agreement first.
  std::vector<StepReport> drain();

 private:
  dist::ProcessGroup& group_;
  std::vector<torch::Tensor> device_rows_;  // double: the loss, then the method's scalars
  std::vector<torch::Tensor> flag_rows_;    // [world] int32: StepOutput::nonfinite_by_rank
  std::vector<StepReport> pending_;         // the host side of the same steps
  size_t agreed_ = 0;                       // pending_[0, agreed_) have their data wait
};

}  // namespace moco::train
