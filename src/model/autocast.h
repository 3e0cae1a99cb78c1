// defines: AutocastGuard (bfloat16 or float16 autocast on one device for the guard's scope),
// autocast_state (what is in force now, to be set again later: a recomputation in backward)
#pragma once

#include <torch/types.h>

namespace moco::model {

// While alive, eligible ops on `device`'s type (convolutions, matrix products) run in `dtype`
// (bfloat16, or float16 on CUDA only) and the rest as autocast's lists say, like `with
// torch.autocast(device_type, dtype)`. The previous state comes back on destruction, and leaving the
// outermost guard frees autocast's cache of cast weights (they change every step). A disabled guard
// does nothing. Throws std::invalid_argument for a device other than CPU and CUDA, a dtype other
// than those two, and float16 on a CPU (LibTorch's CPU autocast has no float16).
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, bool enabled, c10::ScalarType dtype = c10::ScalarType::BFloat16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::BFloat16;
};

struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::BFloat16;
};
// Autocast's state on `device`'s type (CPU or CUDA; other types: off).
AutocastState autocast_state(torch::Device device);

}  // namespace moco::model
