// defines: StepSyncCheck (debug.check_step_syncs: inside a training step, a CUDA call that makes the
// host wait for the device is an error)
#pragma once

#include <torch/types.h>

namespace moco::train {

// While alive, with `on` and a CUDA device: LibTorch's CUDA sync debug mode at "error", so a
// synchronizing call (a device-to-host copy, .item(), a pageable host-to-device copy, a stream
// synchronize) throws, naming the op. The trainer holds one over each step up to its reports, so
// tools/gpu_check.sh proves on a GPU what HostSyncsTest counts on the CPU. A no-op elsewhere.
class StepSyncCheck {
 public:
  StepSyncCheck(bool on, torch::Device device);
  ~StepSyncCheck();
  StepSyncCheck(const StepSyncCheck&) = delete;
  StepSyncCheck& operator=(const StepSyncCheck&) = delete;

 private:
  bool active_ = false;
};

}  // namespace moco::train
