#include "run/device.h"

#include "thrown_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <string>

using moco::run::available_cores;
using moco::run::data_workers;

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
  EXPECT_EQ(data_workers(0, gpu, 1), data_workers(0, gpu, 1, available_cores(), moco::run::node_core_count()));
}

using moco::run::intra_op_threads;

// train.threads = 0 follows data.workers' rule: a bound rank's mask, else its share of the node.
TEST(IntraOpThreadsTest, ConfiguredCountsAreKept) {
  EXPECT_EQ(intra_op_threads(3, 1, 64, 64), 3);
  EXPECT_EQ(intra_op_threads(64, 8, 8, 64), 64);
}

TEST(IntraOpThreadsTest, ASingleRankTakesEveryCoreOfItsMask) {
  EXPECT_EQ(intra_op_threads(0, 1, 64, 64), 64);
  EXPECT_EQ(intra_op_threads(0, 1, 8, 64), 8);
  EXPECT_EQ(intra_op_threads(0, 1, 1, 1), 1);
}

TEST(IntraOpThreadsTest, UnboundRanksShareTheNodeBoundRanksUseTheirMask) {
  // Eight unbound ranks on a 64-core node: 8 threads each, not 64 (512 threads on 64 cores).
  EXPECT_EQ(intra_op_threads(0, 8, 64, 64), 8);
  EXPECT_EQ(intra_op_threads(0, 3, 64, 64), 21);
  EXPECT_EQ(intra_op_threads(0, 2, 2, 2), 1);  // the Slurm test's node: 2 tasks on 2 cores
  // Bound by the launcher (srun --cpus-per-task=4 with task/affinity): its 4, whatever the ranks.
  EXPECT_EQ(intra_op_threads(0, 8, 4, 64), 4);
  EXPECT_EQ(intra_op_threads(0, 2, 1, 2), 1);
  // Never fewer than one, even with more ranks than cores.
  EXPECT_EQ(intra_op_threads(0, 1000, 64, 64), 1);
  // The defaults are this machine's.
  EXPECT_EQ(intra_op_threads(0, 1), intra_op_threads(0, 1, available_cores(), moco::run::node_core_count()));
}

TEST(DescribeCoresTest, NamesTheCpusThreadsAndWorkersAndASharedNode) {
  using moco::run::describe_cores;
  EXPECT_EQ(describe_cores("0-3", 8, 4, 64, 4, 3), "cpus 0-3 (4 cpu(s)), 4 intra-op thread(s), 3 data worker(s)");
  EXPECT_EQ(describe_cores("0-1", 2, 2, 2, 1, 1),
            "cpus 0-1 (1 cpu(s): the node's 2 shared by 2 local ranks), 1 intra-op thread(s), 1 data worker(s)");
  EXPECT_EQ(describe_cores("0-63", 1, 64, 64, 64, 1), "cpus 0-63 (64 cpu(s)), 64 intra-op thread(s), 1 data worker(s)");
}

TEST(AffinityListTest, CountsAsManyCpusAsTheMask) {
  int count = 0;
  const auto list = moco::run::affinity_list();
  size_t start = 0;
  while (start <= list.size()) {
    const auto end = std::min(list.find(',', start), list.size());
    const auto range = list.substr(start, end - start);
    const auto dash = range.find('-');
    count += dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
    start = end + 1;
  }
  EXPECT_EQ(count, available_cores()) << list;
}

using moco::run::choose_cuda_device;
using moco::test::error_of;

// One visible GPU is this rank's own (per-task binding), whatever its local rank.
TEST(ChooseCudaDeviceTest, OneVisibleGpuIsDeviceZeroForEveryLocalRank) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) EXPECT_EQ(choose_cuda_device(1, local_rank, 8, "3"), 0);
  EXPECT_EQ(choose_cuda_device(1, 0, 1, ""), 0);
}

// Every rank sees the node's GPUs: each takes the one of its local rank.
TEST(ChooseCudaDeviceTest, AllGpusVisibleGivesTheLocalRanksOne) {
  for (int local_rank = 0; local_rank < 8; ++local_rank)
    EXPECT_EQ(choose_cuda_device(8, local_rank, 8, ""), local_rank);
  EXPECT_EQ(choose_cuda_device(8, 1, 2, "0,1,2,3,4,5,6,7"), 1);
  EXPECT_EQ(choose_cuda_device(2, 1, 2, "4,5"), 1);
}

// Two per task with eight ranks: cuda:<local rank> would point past the visible devices, and
// guessing would put two ranks on one GPU.
TEST(ChooseCudaDeviceTest, FewerVisibleThanLocalRanksIsAnErrorNamingTheVariableAndCounts) {
  const auto message = error_of([] { choose_cuda_device(2, 5, 8, "6,7"); });
  EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES='6,7'"), std::string::npos) << message;
  EXPECT_NE(message.find("local rank 5 of 8"), std::string::npos) << message;
  EXPECT_NE(message.find("sees 2 CUDA devices"), std::string::npos) << message;
  const auto unset = error_of([] { choose_cuda_device(4, 0, 8, ""); });
  EXPECT_NE(unset.find("CUDA_VISIBLE_DEVICES=unset"), std::string::npos) << unset;
}

// The log line names the host and the local placement.
TEST(DescribePlacementTest, NamesRankHostLocalRankAndDevice) {
  moco::dist::WorldInfo world;
  world.rank = 3;
  world.world_size = 4;
  world.local_rank = 1;
  world.local_size = 2;
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(moco::run::describe_placement(world, torch::kCPU),
            std::string("rank 3/4 on host ") + host + ", local rank 1/2, device cpu");
}

using moco::run::check_early_device;
using moco::run::EarlyDevice;

EarlyDevice early(const char* variable, int local_rank, int index) {
  EarlyDevice e;
  e.launcher.variable = variable;
  e.launcher.local_rank = local_rank;
  e.index = index;
  return e;
}

moco::dist::WorldInfo world_of(int rank, int world_size, int local_rank, int local_size) {
  moco::dist::WorldInfo world;
  world.rank = rank;
  world.world_size = world_size;
  world.local_rank = local_rank;
  world.local_size = local_size;
  return world;
}

// The device made current before MPI started stands when MPI's node-local rank picks the same one.
TEST(EarlyDeviceTest, AgreeingWithMpiIsNoError) {
  EXPECT_EQ(
      error_of([] { check_early_device(early("OMPI_COMM_WORLD_LOCAL_RANK", 3, 3), world_of(7, 8, 3, 4), 3, "node1"); }),
      "");
  // One GPU per task: device 0 whatever the local rank.
  EXPECT_EQ(error_of([] { check_early_device(early("SLURM_LOCALID", 2, 0), world_of(6, 8, 2, 4), 0, "node1"); }), "");
}

TEST(EarlyDeviceTest, AnotherLocalRankOrDeviceIsAnErrorNamingBothAndTheRank) {
  const auto message =
      error_of([] { check_early_device(early("PMIX_LOCAL_RANK", 1, 1), world_of(5, 8, 0, 4), 0, "node2"); });
  EXPECT_EQ(message.rfind("rank 5: on host node2, ", 0), 0u) << message;
  EXPECT_NE(message.find("PMIX_LOCAL_RANK=1 made cuda:1 current before MPI started"), std::string::npos) << message;
  EXPECT_NE(message.find("MPI's node-local rank is 0 of 4, which picks cuda:0"), std::string::npos) << message;
  // The same local rank but another device (the launcher's size let it pick past the visible ones).
  const auto device =
      error_of([] { check_early_device(early("OMPI_COMM_WORLD_LOCAL_RANK", 1, 1), world_of(1, 2, 1, 2), 0, "node3"); });
  EXPECT_NE(device.find("made cuda:1 current"), std::string::npos) << device;
  EXPECT_NE(device.find("which picks cuda:0"), std::string::npos) << device;
}

// On the CPU nothing is chosen before MPI, whatever the launcher says; a plain process chooses nothing.
TEST(EarlyDeviceTest, NothingIsChosenWithoutCudaOrWithoutALauncher) {
  EXPECT_FALSE(moco::run::choose_device_before_mpi({}).has_value());
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA LibTorch with a GPU: the CPU case cannot be seen here";
  const moco::dist::EnvMap ompi = {{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_FALSE(moco::run::choose_device_before_mpi(ompi).has_value());
  EXPECT_EQ(moco::run::select_device(world_of(1, 2, 1, 2), std::nullopt), torch::Device(torch::kCPU));
}

TEST(DescribePlacementTest, NamesTheVariableThatChoseTheDeviceBeforeMpi) {
  const auto line =
      moco::run::describe_placement(world_of(1, 2, 1, 2), torch::kCPU, early("OMPI_COMM_WORLD_LOCAL_RANK", 1, 1));
  EXPECT_NE(line.find(", chosen before MPI started from OMPI_COMM_WORLD_LOCAL_RANK=1"), std::string::npos) << line;
}
