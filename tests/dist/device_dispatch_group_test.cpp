#include "dist/device_dispatch_group.h"

#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

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

namespace {

// A backend that only records what reaches it (and acts as a world of one).
class RecordingGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    record("all_reduce", tensor);
    return local_.all_reduce_async(tensor, op);
  }
  torch::Tensor all_gather(const torch::Tensor& tensor) override {
    record("all_gather", tensor);
    return tensor;
  }
  void broadcast(torch::Tensor& tensor, int) override { record("broadcast", tensor); }
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>&,
                           const std::vector<int64_t>&) override {
    record("all_to_all", input);
    return input;
  }
  void barrier() override { calls.push_back("barrier"); }

  std::vector<std::string> calls;  // "op@device"

 private:
  void record(const char* op, const torch::Tensor& t) {
    calls.push_back(std::string(op) + "@" + (t.is_cuda() ? "cuda" : "cpu"));
  }
  LocalProcessGroup local_;
};

void every_collective(ProcessGroup& group, const torch::TensorOptions& options) {
  auto t = torch::ones({2}, options);
  group.all_reduce(t, ReduceOp::kSum);
  group.all_gather(t);
  group.broadcast(t, 0);
  group.all_to_all(t, {2}, {2});
}

}  // namespace

// Two distinct backends: each tensor must reach the one its device calls for, and only that one.
TEST(DistDispatchTest, CpuTensorsReachOnlyTheCpuBackend) {
  auto cpu = std::make_shared<RecordingGroup>();
  auto cuda = std::make_shared<RecordingGroup>();
  DeviceDispatchGroup dispatch(cpu, cuda);
  every_collective(dispatch, torch::kFloat);
  const std::vector<std::string> cpu_ops{"all_reduce@cpu", "all_gather@cpu", "broadcast@cpu", "all_to_all@cpu"};
  EXPECT_EQ(cpu->calls, cpu_ops);
  EXPECT_TRUE(cuda->calls.empty()) << "a CPU tensor reached the CUDA backend: " << cuda->calls.front();
  dispatch.barrier();  // waits on both
  EXPECT_EQ(cpu->calls.back(), "barrier");
  EXPECT_EQ(cuda->calls, std::vector<std::string>{"barrier"});
}

TEST(DistDispatchTest, CudaTensorsReachOnlyTheCudaBackend) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU for CUDA tensors";
  auto cpu = std::make_shared<RecordingGroup>();
  auto cuda = std::make_shared<RecordingGroup>();
  DeviceDispatchGroup dispatch(cpu, cuda);
  every_collective(dispatch, torch::TensorOptions(torch::kFloat).device(torch::kCUDA));
  EXPECT_TRUE(cpu->calls.empty()) << "a CUDA tensor reached the CPU backend: " << cpu->calls.front();
  EXPECT_EQ(cuda->calls,
            (std::vector<std::string>{"all_reduce@cuda", "all_gather@cuda", "broadcast@cuda", "all_to_all@cuda"}));
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
