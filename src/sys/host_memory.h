// defines: keep_freed_host_memory (glibc malloc settings and LibTorch's CPU allocator for a training
// process), host_memory_line (what it did, for the log at start)
#pragma once

#include <string>

namespace moco::sys {

// With glibc's defaults a training step's large host tensors are page-faulted in afresh each time:
// blocks above the (at most 32 MiB) mmap threshold are unmapped when freed, and freed memory at the
// top of a heap is given back once it passes the trim threshold (58-114 thousand minor faults per
// resnet_tiny step on the 2-core CPU machine). This keeps freed blocks up to 32 MiB in the process for
// reuse: the mmap threshold is fixed at its maximum, trimming is off, and LibTorch's CPU allocator is
// replaced by one whose freed blocks fit the next request of the same size (see the .cpp). The step
// ran 1.06-1.23x as fast, at a lower peak of memory (README). Does nothing where the user set glibc's
// malloc variables (GLIBC_TUNABLES, MALLOC_*_), under MOCO_KEEP_HOST_MEMORY=0 (glibc's and LibTorch's
// defaults, to compare or to rule this out) or where the C library is not glibc. Call once, first
// thing, before any tensor is made. Returns what was done.
enum class HostMemory { kNotAsked, kKept, kSwitchedOff, kUserMallocSettings, kRefusedByGlibc, kNotGlibc };
HostMemory keep_freed_host_memory();

// One line for the log at start: what the last keep_freed_host_memory did, or why it did nothing.
std::string host_memory_line();

}  // namespace moco::sys
