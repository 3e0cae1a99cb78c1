#include "sys/workarounds.h"

#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"

#include <spdlog/spdlog.h>

namespace moco::sys {

void log_workarounds() {
  spdlog::info("{}", host_memory_line());
  spdlog::info("{}", openblas_settings_line());
}

}  // namespace moco::sys
