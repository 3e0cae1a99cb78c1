// keep_freed_host_memory: large host tensors freed by the process stay in it for reuse, the user's
// own glibc malloc settings win, MOCO_KEEP_HOST_MEMORY=0 leaves everything as it was, and the log
// line says which.
#include "sys/host_memory.h"

#include "scoped_env.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <fcntl.h>
#include <iterator>
#include <unistd.h>
#include <vector>

namespace {

using moco::sys::HostMemory;
using moco::test::ScopedEnv;

constexpr const char* kMallocVariables[] = {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                            "MALLOC_TOP_PAD_"};

// Read with plain system calls: a stream's buffers would be allocated above the block under test and
// keep glibc from trimming the heap's top.
long resident_mib() {
  char text[128] = {};
  const int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0 || read(fd, text, sizeof text - 1) <= 0) std::abort();
  close(fd);
  long size_pages = 0, resident_pages = 0;
  if (std::sscanf(text, "%ld %ld", &size_pages, &resident_pages) != 2) std::abort();
  return resident_pages * (sysconf(_SC_PAGESIZE) / 1024) / 1024;
}

// Every test starts with none of glibc's malloc variables (nor MOCO_KEEP_HOST_MEMORY) set, and has them back
// afterwards.
class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unset_.reserve(std::size(kMallocVariables) + 1);
    for (const char* name : kMallocVariables) unset_.emplace_back(name, nullptr);
    unset_.emplace_back("MOCO_KEEP_HOST_MEMORY", nullptr);
  }

 private:
  std::vector<ScopedEnv> unset_;
};

// The tests of what the settings do: skipped where glibc's malloc is not the allocator.
class HostMemoryKeptTest : public HostMemoryTest {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
    GTEST_SKIP() << "glibc's malloc is not the allocator here";
#endif
    HostMemoryTest::SetUp();
    ASSERT_EQ(moco::sys::keep_freed_host_memory(), HostMemory::kKept);
  }
};

TEST_F(HostMemoryKeptTest, FreedLargeTensorsStayInTheProcess) {
  // Four of 28 MiB, a step's activations in small. With glibc's defaults, in a process that has not
  // raised its thresholds yet (ctest runs this test alone), each is mapped and unmapped; with only
  // the mmap threshold raised, the 112 MiB freed at the heap's top passes any trim threshold glibc sets
  // itself (at most 64 MiB). Either way the resident size falls by about 112 MiB when they are freed.
  // Kept, nothing is given back; and made again, they reuse the freed blocks instead of growing the
  // heap (with LibTorch's posix_memalign each round took 112 MiB more, up to 600 MiB).
  long after_first_round = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<torch::Tensor> tensors;
    for (int i = 0; i < 4; ++i) tensors.push_back(torch::empty({int64_t{28} << 18}).fill_(1.0f));
    const long held = resident_mib();
    tensors.clear();
    const long after_free = resident_mib();
    EXPECT_LT(held - after_free, 8) << "round " << round << ": " << held << " MiB resident with four 28 MiB tensors, "
                                    << after_free << " MiB after freeing them";
    if (round == 0) after_first_round = after_free;
    EXPECT_LT(after_free - after_first_round, 8) << "round " << round << ": the heap grew from " << after_first_round
                                                 << " to " << after_free << " MiB for the same four tensors";
  }
}

// The heap's freed top is not given back either. Probed with malloc itself: a block made and freed
// first thing in a fresh process (ctest runs this test alone) comes from the top and goes back to it,
// which glibc trims when the top passes its trim threshold (128 KiB unless it rose on its own).
TEST_F(HostMemoryKeptTest, FreedHeapTopIsNotGivenBack) {
  constexpr size_t kBytes = size_t{24} << 20;
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  asm volatile("" : : "r"(block) : "memory");  // the writes must happen: the compiler may drop them otherwise
  const long held = resident_mib();
  std::free(block);
  const long after_free = resident_mib();
  EXPECT_LT(held - after_free, 8) << held << " MiB resident with a 24 MiB block, " << after_free
                                  << " MiB after freeing it";
}

// The blocks it hands out are 64-byte aligned like LibTorch's own, hold what is written, and work
// through LibTorch's raw interface (the block is its own context).
TEST_F(HostMemoryKeptTest, BlocksAreAlignedAndUsable) {
  for (const int64_t n :
       {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{1000}, int64_t{1} << 20, (int64_t{7} << 20) + 5}) {
    const auto t = torch::arange(n, torch::kDouble);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64, 0u) << n << " doubles";
    EXPECT_EQ(t.sum().item<double>(), static_cast<double>(n) * static_cast<double>(n - 1) / 2) << n << " doubles";
  }
  auto* allocator = c10::GetCPUAllocator();
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  void* raw = allocator->raw_allocate(12345);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(raw) % 64, 0u);
  std::memset(raw, 7, 12345);
  allocator->raw_deallocate(raw);
}

TEST_F(HostMemoryTest, StandsAsideWhenTheUserSetGlibcMallocVariables) {
  for (const char* name : kMallocVariables) {
    // Set and empty counts: `GLIBC_TUNABLES=` is how to run with glibc's defaults.
    ScopedEnv user(name, "");
    EXPECT_EQ(moco::sys::keep_freed_host_memory(), HostMemory::kUserMallocSettings) << name << " was set";
    EXPECT_NE(moco::sys::host_memory_line().find("the user's glibc malloc variables"), std::string::npos)
        << moco::sys::host_memory_line();
  }
}

TEST_F(HostMemoryKeptTest, LogLineSaysWhatWasDoneAndHowToTurnItOff) {
  EXPECT_EQ(moco::sys::host_memory_line(),
            "host memory: freed blocks up to 32 MiB kept, LibTorch CPU allocator replaced "
            "(MOCO_KEEP_HOST_MEMORY=0 turns this off)");
}

// MOCO_KEEP_HOST_MEMORY=0: LibTorch's allocator stays, and glibc's thresholds too -- in a fresh
// process (ctest runs this test alone) a freed 24 MiB block goes back to the system at once, as with
// glibc's defaults (mapped apart, or trimmed from the heap's top), where the settings would keep it.
TEST_F(HostMemoryTest, SwitchedOffChangesNothing) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc is not the allocator here";
#endif
  ScopedEnv off("MOCO_KEEP_HOST_MEMORY", "0");
  auto* const allocator_before = c10::GetCPUAllocator();
  EXPECT_EQ(moco::sys::keep_freed_host_memory(), HostMemory::kSwitchedOff);
  EXPECT_EQ(c10::GetCPUAllocator(), allocator_before) << "LibTorch's CPU allocator was replaced";
  constexpr size_t kBytes = size_t{24} << 20;
  void* block = std::malloc(kBytes);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  asm volatile("" : : "r"(block) : "memory");
  const long held = resident_mib();
  std::free(block);
  const long after_free = resident_mib();
  EXPECT_GT(held - after_free, 16) << held << " MiB resident with a 24 MiB block, " << after_free
                                   << " MiB after freeing it: glibc's thresholds were changed";
  EXPECT_EQ(moco::sys::host_memory_line(), "host memory: glibc's and LibTorch's defaults (MOCO_KEEP_HOST_MEMORY=0)");
}

// Any other value keeps the settings: only 0 turns them off.
TEST_F(HostMemoryTest, OnlyZeroSwitchesOff) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc is not the allocator here";
#endif
  ScopedEnv on("MOCO_KEEP_HOST_MEMORY", "1");
  EXPECT_EQ(moco::sys::keep_freed_host_memory(), HostMemory::kKept);
}

}  // namespace
