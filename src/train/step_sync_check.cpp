#include "train/step_sync_check.h"

#if MOCO_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace moco::train {

StepSyncCheck::StepSyncCheck(bool on, torch::Device device) {
  if (on) no_reads_.emplace("debug.check_step_syncs: inside a training step");
#if MOCO_WITH_CUDA
  if (!on || !device.is_cuda()) return;
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  active_ = true;
#else
  (void)on;
  (void)device;
#endif
}

StepSyncCheck::~StepSyncCheck() {
#if MOCO_WITH_CUDA
  if (active_) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
#endif
}

}  // namespace moco::train
