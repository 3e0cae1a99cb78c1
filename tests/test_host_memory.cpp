// keep_freed_host_memory: large host tensors, freed and made again, are not page-faulted in again.
#include "train/host_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <cstdlib>
#include <vector>

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Minor page faults per round of `count` tensors of `mib` MiB each made, written and freed (a step's
// activations in small), after `warmup` rounds.
long faults_per_round(int count, int mib, int warmup) {
  const auto round = [&] {
    std::vector<torch::Tensor> tensors;
    for (int i = 0; i < count; ++i) tensors.push_back(torch::empty({int64_t{mib} << 18}).fill_(1.0f));
  };
  for (int i = 0; i < warmup; ++i) round();
  const long before = minor_faults();
  constexpr int kRounds = 3;
  for (int i = 0; i < kRounds; ++i) round();
  return (minor_faults() - before) / kRounds;
}

}  // namespace

TEST(HostMemoryTest, LargeTensorsFreedAndMadeAgainAreNotFaultedInAgain) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc is not the allocator here";
#endif
  // The settings are made by the call, whatever the environment said at start; unset, it makes them.
  for (const char* name : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"})
    unsetenv(name);
  // Six of 16 MiB: 96 MiB at the heap's top, above any trim threshold glibc sets itself (at most 64
  // MiB), so the part above it is given back and faulted in again each round: all 24576 pages in a
  // fresh process (20480 per round here), 8192 after other tests in the process raised the thresholds.
  const long with_defaults = faults_per_round(6, 16, 1);
  EXPECT_GT(with_defaults, 4000) << "glibc's defaults no longer fault here: this test shows nothing";
  moco::train::keep_freed_host_memory();
  // The same six: kept (no trimming). Then 28 MiB: above the 16 MiB that glibc's own threshold rose to above (it would map and unmap each),
  // below the 32 MiB this sets. Blocks aligned to 64 bytes, as LibTorch's are, fragment the heap: a
  // freed one is a little short for the next request, so the heap grows for a few rounds (to 768 MiB
  // for these 112 in a fresh process) before every request finds a free block.
  const long kept_16 = faults_per_round(6, 16, 1);
  const long kept_28 = faults_per_round(4, 28, 8);
  EXPECT_LT(kept_16, 500) << "six of 16 MiB; with glibc's defaults " << with_defaults << " per round";
  EXPECT_LT(kept_28, 500) << "four of 28 MiB";
}
