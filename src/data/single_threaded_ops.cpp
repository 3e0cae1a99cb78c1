#include "data/single_threaded_ops.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>

namespace moco::data {

void run_ops_single_threaded() {
  // LibTorch's OpenMP backend sizes a thread's parallel regions by that thread's OpenMP setting,
  // which it initialises lazily from the global count on the thread's first op: initialise now,
  // then lower this thread's setting alone. at::set_num_threads would lower every thread's. The
  // OpenMP runtime is whichever LibTorch loaded (found at run time, so none is linked here); without
  // one (a LibTorch on another backend) this does nothing.
  at::internal::lazy_init_num_threads();
  using SetNumThreads = void (*)(int);
  if (const auto set = reinterpret_cast<SetNumThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
}

}  // namespace moco::data
