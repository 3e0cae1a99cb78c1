// defines: keep_freed_host_memory (glibc malloc settings for a training process)
#pragma once

namespace moco::train {

// With glibc's defaults a training step's large host tensors are page-faulted in afresh each time:
// blocks above the (at most 32 MiB) mmap threshold are unmapped when freed, and freed memory at the
// top of a heap is given back once it passes the trim threshold (58-114 thousand minor faults per
// resnet_tiny step on the 2-core CPU machine). This keeps freed blocks up to 32 MiB in the process for
// reuse: the mmap threshold is fixed at its maximum, trimming is off, and LibTorch's CPU allocator is
// replaced by one whose freed blocks fit the next request of the same size (see the .cpp). The step
// ran 1.06-1.23x as fast, at a lower peak of memory (README). Does nothing where the user set glibc's
// malloc variables (GLIBC_TUNABLES, MALLOC_*_) or the C library is not glibc. Call once, first thing,
// before any tensor is made. Returns whether the settings were made.
bool keep_freed_host_memory();

}  // namespace moco::train
