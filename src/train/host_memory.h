// defines: keep_freed_host_memory (glibc malloc settings for a training process)
#pragma once

namespace moco::train {

// With glibc's defaults a training step's large host tensors are page-faulted in afresh each time:
// blocks above the (at most 32 MiB) mmap threshold are unmapped when freed, and freed memory at the
// top of a heap is given back once it passes the trim threshold. On the 2-core CPU machine that was
// 58-114 thousand minor page faults per resnet_tiny step, about a thousand with this, and the step
// ran 0.84-1.16x as fast with it (median 1.05, nine pairs of bench_step runs; README). This keeps
// freed blocks up to 32 MiB in the process for reuse: the mmap threshold is fixed at its maximum and
// trimming is off. The price is a higher peak of memory (freed blocks fragment and stay). Does
// nothing where the user set glibc's malloc variables (GLIBC_TUNABLES, MALLOC_*_) or the C library
// is not glibc. Call once, first thing.
void keep_freed_host_memory();

}  // namespace moco::train
