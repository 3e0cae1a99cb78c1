#include "train/device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

using moco::train::available_cores;
using moco::train::data_workers;

// data.workers = 0 is resolved from the cores; a configured count is kept as it is.
TEST(DataWorkersTest, ConfiguredCountsAreKept) {
  EXPECT_EQ(data_workers(3, torch::kCPU, 1), 3);
  EXPECT_EQ(data_workers(5, torch::Device(torch::kCUDA, 0), 8), 5);
}

TEST(DataWorkersTest, OnTheCpuTheCoresComputeTheStepSoOneWorker) {
  EXPECT_EQ(data_workers(0, torch::kCPU, 1), 1);
  EXPECT_EQ(data_workers(0, torch::kCPU, 4), 1);
}

TEST(DataWorkersTest, OnCudaARankTakesItsShareOfTheCoresButOne) {
  const torch::Device gpu(torch::kCUDA, 0);
  const int cores = available_cores();
  const bool unbound = cores >= static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(data_workers(0, gpu, 1), std::max(1, cores - 1));
  // Ranks that share an unbound node split its cores; never fewer than one worker.
  EXPECT_EQ(data_workers(0, gpu, 2), std::max(1, (unbound ? cores / 2 : cores) - 1));
  EXPECT_EQ(data_workers(0, gpu, 1000), unbound ? 1 : std::max(1, cores - 1));
}
