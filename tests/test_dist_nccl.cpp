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
