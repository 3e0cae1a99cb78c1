#include "dist/device_dispatch_group.h"

#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace moco::dist;

TEST(DistDispatchTest, RawExchangeCarriesBytesThroughTheCpuGroup) {
  auto group = test_world_group();
  const auto raw = raw_exchange(group);
  const int rank = group->rank(), world = group->world_size();
  char id[16] = {};
  if (rank == 0) std::snprintf(id, sizeof(id), "unique-id-%d", 42);
  raw.broadcast(id, sizeof(id), 0);
  EXPECT_STREQ(id, "unique-id-42");
  const int64_t mine[2] = {rank, 10 * rank};
  std::vector<int64_t> all(2 * world, -1);
  raw.all_gather(mine, all.data(), sizeof(mine));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(all[2 * r], r);
    EXPECT_EQ(all[2 * r + 1], 10 * r);
  }
}

TEST(DistDispatchTest, CpuTensorsGoToTheCpuBackend) {
  auto group = test_world_group();
  DeviceDispatchGroup dispatch(group, group);  // no GPU here: both sides the same CPU group
  auto t = torch::ones({3}) * (group->rank() + 1);
  dispatch.all_reduce(t, ReduceOp::kSum);
  const int w = group->world_size();
  EXPECT_DOUBLE_EQ(t[0].item<double>(), w * (w + 1) / 2.0);
  EXPECT_EQ(dispatch.all_gather(torch::zeros({2, 1})).size(0), 2 * w);
  dispatch.barrier();
}
