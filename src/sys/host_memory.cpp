#include "sys/host_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace moco::sys {
namespace {

#if defined(__GLIBC__)
constexpr std::uintptr_t kAlignment = 64;  // LibTorch's own CPU alignment (c10::gAlignment)

// The byte before each block holds how far it lies past what malloc returned (16 to 64), so that
// the deleter needs only the data pointer: the block is its own context, and LibTorch's raw
// allocate/deallocate interface works as with its default allocator.
void free_aligned(void* data) {
  if (data == nullptr) return;
  auto* bytes = static_cast<unsigned char*>(data);
  std::free(bytes - bytes[-1]);
}

// LibTorch's default CPU allocator calls posix_memalign, and glibc (2.36) serves an aligned request
// of n bytes by carving n plus the alignment out of a free block and returning the small rest to a
// per-thread cache, where it does not merge back. A freed block is then always a little short of the
// next request of the same size, so with freed blocks kept (below) a loop of four 28 MiB tensors grew
// the heap to 600 MiB before it settled. Over-allocating with plain malloc and aligning by hand makes
// a freed block exactly as big as the next request for the same size.
class HeapReusingCpuAllocator final : public c10::Allocator {
 public:
  // LibTorch 2.3 made allocate non-const, 2.2 added copy_data (CI builds 1.13 and 2.15).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override { return allocate_block(n); }
#else
  c10::DataPtr allocate(size_t n) const override { return allocate_block(n); }
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
#endif
  c10::DeleterFnPtr raw_deleter() const override { return &free_aligned; }

 private:
  static c10::DataPtr allocate_block(size_t n) {
    if (n == 0) return {nullptr, nullptr, &free_aligned, c10::Device(c10::DeviceType::CPU)};
    void* raw = std::malloc(n + kAlignment);
    TORCH_CHECK(raw != nullptr, "out of host memory: could not allocate ", n, " bytes");
    const auto address = reinterpret_cast<std::uintptr_t>(raw);
    const auto offset = kAlignment - address % kAlignment;  // 1..64, never 0: the offset byte needs room
    auto* data = static_cast<unsigned char*>(raw) + offset;
    data[-1] = static_cast<unsigned char>(offset);
    return {data, data, &free_aligned, c10::Device(c10::DeviceType::CPU)};
  }
};
#endif

HostMemory& last_outcome() {
  static HostMemory outcome = HostMemory::kNotAsked;
  return outcome;
}

HostMemory settings_made_or_why_not() {
  const char* keep = std::getenv("MOCO_KEEP_HOST_MEMORY");
  if (keep != nullptr && std::strcmp(keep, "0") == 0) return HostMemory::kSwitchedOff;
#if defined(__GLIBC__)
  for (const char* user_setting :
       {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    if (std::getenv(user_setting) != nullptr) return HostMemory::kUserMallocSettings;
  // 32 MiB: the largest threshold glibc accepts on 64-bit; setting it also stops its dynamic adjustment.
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, INT_MAX) != 1)
    return HostMemory::kRefusedByGlibc;
  static HeapReusingCpuAllocator allocator;
  // Priority above the default allocator's (0), so a later default registration does not undo it.
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
  return HostMemory::kKept;
#else
  return HostMemory::kNotGlibc;
#endif
}

}  // namespace

HostMemory keep_freed_host_memory() { return last_outcome() = settings_made_or_why_not(); }

std::string host_memory_line() {
  switch (last_outcome()) {
    case HostMemory::kKept:
      return "host memory: freed blocks up to 32 MiB kept, LibTorch CPU allocator replaced "
             "(MOCO_KEEP_HOST_MEMORY=0 turns this off)";
    case HostMemory::kSwitchedOff:
      return "host memory: glibc's and LibTorch's defaults (MOCO_KEEP_HOST_MEMORY=0)";
    case HostMemory::kUserMallocSettings:
      return "host memory: the user's glibc malloc variables (GLIBC_TUNABLES or MALLOC_*_) obeyed, LibTorch CPU "
             "allocator kept";
    case HostMemory::kRefusedByGlibc:
      return "host memory: glibc refused the malloc thresholds, LibTorch CPU allocator kept";
    case HostMemory::kNotGlibc:
      return "host memory: not glibc's malloc, defaults kept";
    case HostMemory::kNotAsked:
      break;
  }
  return "host memory: defaults (keep_freed_host_memory not called)";
}

}  // namespace moco::sys
