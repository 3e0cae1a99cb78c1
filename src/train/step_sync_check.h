// defines: StepSyncCheck (debug.check_step_syncs: inside a training step, a call that makes the
// host wait for the device is an error)
#pragma once

#include "run/host_reads.h"

#include <torch/types.h>

#include <optional>

namespace moco::train {

// While alive, with `on`: a run::read_on_host (every read the trainer counts) throws, on any device;
// with a CUDA device also LibTorch's CUDA sync debug mode at "error", so any synchronizing call (a
// device-to-host copy, .item(), a pageable host-to-device copy, a stream synchronize) throws, naming
// the op. The trainer holds one over each step up to its reports, so tools/gpu_check.sh proves on a
// GPU what HostSyncsTest counts on the CPU, and a run on the CPU already fails at a counted read.
class StepSyncCheck {
 public:
  StepSyncCheck(bool on, torch::Device device);
  ~StepSyncCheck();
  StepSyncCheck(const StepSyncCheck&) = delete;
  StepSyncCheck& operator=(const StepSyncCheck&) = delete;

 private:
  bool active_ = false;
  std::optional<run::NoHostReads> no_reads_;
};

}  // namespace moco::train
