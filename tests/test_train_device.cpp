#include "train/device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

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
  // An unbound rank (its mask is the whole node) shares the node with the other local ranks.
  EXPECT_EQ(data_workers(0, gpu, 1, 64, 64), 63);
  EXPECT_EQ(data_workers(0, gpu, 8, 64, 64), 7);
  EXPECT_EQ(data_workers(0, gpu, 3, 64, 64), 20);
  // A rank the launcher bound to 8 of the node's cores uses those, whatever the number of ranks.
  EXPECT_EQ(data_workers(0, gpu, 8, 8, 64), 7);
  EXPECT_EQ(data_workers(0, gpu, 1, 8, 64), 7);
  // Never fewer than one.
  EXPECT_EQ(data_workers(0, gpu, 1, 1, 1), 1);
  EXPECT_EQ(data_workers(0, gpu, 1000, 64, 64), 1);
  // The defaults are this machine's.
  EXPECT_EQ(data_workers(0, gpu, 1), data_workers(0, gpu, 1, available_cores(), moco::train::node_core_count()));
}
