// The NCCL backend. Built wherever the CUDA toolkit and NCCL are (CI included, with a CPU LibTorch
// and no GPU): there the tests prove that the backend compiles, links, and fails cleanly; the
// collectives themselves run where a GPU and a CUDA LibTorch are.
#if MOCO_WITH_NCCL

#include "dist/errors.h"
#include "dist/nccl_process_group.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <torch/torch.h>

#include <cstring>
#include <string>

namespace moco::dist {
namespace {

// A world of one: the host exchanges are copies.
HostExchange single_rank_exchange() {
  HostExchange host;
  host.broadcast = [](void*, std::size_t, int) {};
  host.all_gather = [](const void* send, void* recv, std::size_t bytes) { std::memcpy(recv, send, bytes); };
  return host;
}

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

TEST(NcclDtype, MapsEveryDtypeTheModelUses) {
  EXPECT_EQ(nccl_dtype(torch::kFloat32), std::optional<int>(ncclFloat32));
  EXPECT_EQ(nccl_dtype(torch::kFloat16), std::optional<int>(ncclFloat16));
  EXPECT_EQ(nccl_dtype(torch::kBFloat16), std::optional<int>(ncclBfloat16));
  EXPECT_EQ(nccl_dtype(torch::kFloat64), std::optional<int>(ncclFloat64));
  EXPECT_EQ(nccl_dtype(torch::kInt64), std::optional<int>(ncclInt64));
  EXPECT_EQ(nccl_dtype(torch::kInt32), std::optional<int>(ncclInt32));
  EXPECT_EQ(nccl_dtype(torch::kUInt8), std::optional<int>(ncclUint8));
  EXPECT_EQ(nccl_dtype(torch::kInt8), std::optional<int>(ncclInt8));
}

TEST(NcclDtype, RefusesWhatNcclCannotCarry) {
  EXPECT_EQ(nccl_dtype(torch::kBool), std::nullopt);
  EXPECT_EQ(nccl_dtype(torch::kInt16), std::nullopt);
  EXPECT_EQ(nccl_dtype(torch::kComplexFloat), std::nullopt);
}

TEST(NcclProcessGroup, WithoutGpuConstructionThrowsDistErrorNamingCuda) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    NcclProcessGroup group(/*rank=*/0, /*world_size=*/1, single_rank_exchange(), /*device=*/0);
    FAIL() << "constructed an NCCL group without a CUDA device";
  } catch (const DistError& error) {
    const std::string what = error.what();
    RecordProperty("error", what);  // in --gtest_output=xml: what a user without a GPU reads
    EXPECT_EQ(error.rank(), 0);
    EXPECT_NE(what.find("rank 0: "), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA"), std::string::npos) << what;
  }
}

TEST(NcclProcessGroup, RefusesARankOutsideTheWorld) {
  EXPECT_THROW(NcclProcessGroup(/*rank=*/1, /*world_size=*/1, single_rank_exchange(), /*device=*/0), DistError);
}

TEST(NcclProcessGroup, SingleRankCollectivesOnGpu) {
  // A CPU LibTorch cannot make CUDA tensors even where the machine has a GPU.
  if (!torch::cuda::is_available() || cuda_device_count() == 0) {
    GTEST_SKIP() << "needs a CUDA device and a CUDA build of LibTorch";
  }
  NcclProcessGroup group(/*rank=*/0, /*world_size=*/1, single_rank_exchange(), /*device=*/0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);

  torch::Tensor summed = torch::arange(6, cuda.dtype(torch::kFloat32)).reshape({2, 3});
  group.all_reduce(summed, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(summed.cpu(), torch::arange(6, torch::kFloat32).reshape({2, 3})));
  torch::Tensor averaged = torch::full({4}, 3.0, cuda.dtype(torch::kFloat16));
  auto work = std::dynamic_pointer_cast<NcclWork>(group.all_reduce_async(averaged, ReduceOp::kAvg));
  ASSERT_NE(work, nullptr);
  work->wait_host();
  EXPECT_TRUE(torch::equal(averaged.cpu(), torch::full({4}, 3.0, torch::kFloat16)));

  const torch::Tensor rows = torch::arange(8, cuda.dtype(torch::kInt64)).reshape({4, 2});
  EXPECT_TRUE(torch::equal(group.all_gather(rows).cpu(), rows.cpu()));

  torch::Tensor bytes = torch::arange(5, cuda.dtype(torch::kUInt8));
  group.broadcast(bytes, /*root=*/0);
  EXPECT_TRUE(torch::equal(bytes.cpu(), torch::arange(5, torch::kUInt8)));

  const torch::Tensor moved = group.all_to_all(rows, /*send_counts=*/{4}, /*recv_counts=*/{4});
  EXPECT_TRUE(torch::equal(moved.cpu(), rows.cpu()));
  const torch::Tensor none = group.all_to_all(rows.narrow(0, 0, 0), {0}, {0});
  EXPECT_EQ(none.size(0), 0);
  EXPECT_EQ(none.size(1), 2);

  group.barrier();

  // Checked before NCCL sees it: a CPU tensor, or counts that do not cover the input.
  torch::Tensor on_cpu = torch::ones({2});
  EXPECT_THROW(group.all_reduce(on_cpu, ReduceOp::kSum), DistError);
  EXPECT_THROW(group.all_to_all(rows, {3}, {3}), DistError);
}

}  // namespace
}  // namespace moco::dist

#endif  // MOCO_WITH_NCCL

// The transport in the rank log (dist/nccl_transport_log.h): needs neither CUDA nor NCCL, so it is
// tested wherever the suite builds.
#include "dist/nccl_transport_log.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace moco::dist {
namespace {

TEST(NcclTransportLog, UnsetNcclDebugSendsTheInfoLogToTheRunFolder) {
  const NcclDebugLog plan = plan_nccl_debug_log({}, "/run/rank1.nccl.log", "node1", 42);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "INIT,P2P,NET"}, {"NCCL_DEBUG_FILE", "/run/rank1.nccl.log"}};
  EXPECT_EQ(plan.set, expected);
  EXPECT_EQ(plan.file, "/run/rank1.nccl.log");
}

TEST(NcclTransportLog, WhatTheUserSetStands) {
  // Their subsystems and their file (NCCL's %h and %p expanded, as NCCL opens it).
  const NcclDebugLog own = plan_nccl_debug_log(
      {{"NCCL_DEBUG_SUBSYS", "INIT"}, {"NCCL_DEBUG_FILE", "/logs/nccl.%h.%p.%%"}}, "/run/rank0.nccl.log", "n7", 42);
  const std::vector<std::pair<std::string, std::string>> level_only = {{"NCCL_DEBUG", "INFO"}};
  EXPECT_EQ(own.set, level_only);
  EXPECT_EQ(own.file, "/logs/nccl.n7.42.%");
  // Their level: nothing set; their file read when the level logs connections.
  const NcclDebugLog info =
      plan_nccl_debug_log({{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", "/l/%p.log"}}, "/r", "n", 9);
  EXPECT_TRUE(info.set.empty());
  EXPECT_EQ(info.file, "/l/9.log");
  const NcclDebugLog stdout_info = plan_nccl_debug_log({{"NCCL_DEBUG", "INFO"}}, "/r/rank0.nccl.log", "n", 9);
  EXPECT_TRUE(stdout_info.set.empty());
  EXPECT_TRUE(stdout_info.file.empty());
  EXPECT_NE(stdout_info.why_none.find("on stdout"), std::string::npos) << stdout_info.why_none;
  const NcclDebugLog warn = plan_nccl_debug_log({{"NCCL_DEBUG", "WARN"}}, "/r/rank0.nccl.log", "n", 9);
  EXPECT_TRUE(warn.set.empty());
  EXPECT_TRUE(warn.file.empty());
  EXPECT_NE(warn.why_none.find("NCCL_DEBUG=WARN logs no connections"), std::string::npos) << warn.why_none;
}

TEST(NcclTransportLog, WithoutARunFolderNothingIsSet) {
  // NCCL would print its INFO lines on stdout.
  const NcclDebugLog plan = plan_nccl_debug_log({}, "", "n", 9);
  EXPECT_TRUE(plan.set.empty());
  EXPECT_TRUE(plan.file.empty());
  EXPECT_FALSE(plan.why_none.empty());
}

// Lines as NCCL 2.2x writes them (p2p.cc, shm.cc, net.cc), seen from rank 1 of 4 on two hosts.
TEST(NcclTransportLog, SummarisesTheConnectionsByTransportAndPeer) {
  const std::string log =
      "node1:123:130 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>\n"
      "node1:123:130 [1] NCCL INFO Using network IB\n"
      "node1:123:140 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
      "node1:123:140 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read\n"
      "node1:123:140 [1] NCCL INFO Channel 00/0 : 2[0] -> 1[1] [receive] via NET/IB/0/GDRDMA\n"
      "node1:123:140 [1] NCCL INFO Channel 00/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA\n"
      "node1:123:140 [1] NCCL INFO Channel 01/0 : 1[1] -> 3[1] [send] via NET/IB/1/GDRDMA\n"
      "node1:123:140 [1] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n";
  EXPECT_EQ(summarize_nccl_transports(log, 1),
            "P2P/CUMEM/read with rank 0 (2 connections); NET/IB/0/GDRDMA with rank 2 (1 connection); "
            "NET/IB/1/GDRDMA with rank 3 (2 connections); network IB");
  // Shared memory where P2P is not possible (GPUs the cgroup hides from each other).
  EXPECT_EQ(summarize_nccl_transports("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
                                      "h:1:2 [0] NCCL INFO Channel 00/0 : 2[2] -> 0[0] via SHM/direct/direct\n",
                                      0),
            "SHM/direct/direct with ranks 1, 2 (2 connections)");
  EXPECT_EQ(summarize_nccl_transports("h:1:2 [0] NCCL INFO Using network Socket\n", 0), "") << "no connection yet";
  EXPECT_EQ(summarize_nccl_transports("", 0), "");
}

}  // namespace
}  // namespace moco::dist
