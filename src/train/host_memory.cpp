#include "train/host_memory.h"

#include <climits>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace moco::train {

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  for (const char* user_setting : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(user_setting) != nullptr) return;
  // 32 MiB: the largest threshold glibc accepts on 64-bit; setting it also stops its dynamic adjustment.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace moco::train
