#include "model/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>
#include <string>

// LibTorch 2.4 keys autocast's state by device type; 1.13 has one function pair per device.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MOCO_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define MOCO_AUTOCAST_BY_DEVICE_TYPE 0
#endif

namespace moco::model {
namespace {

bool is_enabled(c10::DeviceType type) {
#if MOCO_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_enabled(c10::DeviceType type, bool enabled) {
#if MOCO_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA)
    at::autocast::set_enabled(enabled);
  else
    at::autocast::set_cpu_enabled(enabled);
#endif
}

c10::ScalarType get_dtype(c10::DeviceType type) {
#if MOCO_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_dtype(c10::DeviceType type, c10::ScalarType dtype) {
#if MOCO_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA)
    at::autocast::set_autocast_gpu_dtype(dtype);
  else
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

}  // namespace

AutocastState autocast_state(torch::Device device) {
  const auto type = device.type();
  if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA) return {};
  return {is_enabled(type), get_dtype(type)};
}

AutocastGuard::AutocastGuard(torch::Device device, bool enabled, c10::ScalarType dtype)
    : enabled_(enabled), type_(device.type()) {
  if (!enabled_) return;
  if (type_ != c10::DeviceType::CPU && type_ != c10::DeviceType::CUDA)
    throw std::invalid_argument("autocast is supported on CPU and CUDA, not on " + device.str());
  if (dtype != c10::ScalarType::BFloat16 && dtype != c10::ScalarType::Half)
    throw std::invalid_argument(std::string("autocast runs in bfloat16 or float16, not ") + c10::toString(dtype));
  if (dtype == c10::ScalarType::Half && type_ == c10::DeviceType::CPU)
    throw std::invalid_argument("float16 autocast needs CUDA: LibTorch's CPU autocast has no float16");
  was_enabled_ = is_enabled(type_);
  previous_dtype_ = get_dtype(type_);
  set_enabled(type_, true);
  set_dtype(type_, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(type_, was_enabled_);
  set_dtype(type_, previous_dtype_);
}

}  // namespace moco::model
