// defines: DeviceDispatchGroup (one ProcessGroup over two backends: CUDA tensors to one, CPU tensors
// to the other), host_exchange (HostExchange over a CPU ProcessGroup, to bootstrap NCCL)
#pragma once

#include "dist/process_group.h"

#include <cstddef>
#include <functional>
#include <memory>

namespace moco::dist {

// The trainer holds one group and hands it tensors of either kind: on a GPU run, gradients, BN
// buffers and shuffled images are CUDA tensors (NCCL), while the loss statistics, queue checksums
// and kNN features are CPU tensors (MPI). Both backends span the same ranks in the same order.
class DeviceDispatchGroup final : public ProcessGroup {
 public:
  DeviceDispatchGroup(std::shared_ptr<ProcessGroup> cpu, std::shared_ptr<ProcessGroup> cuda);
  int rank() const override { return cpu_->rank(); }
  int world_size() const override { return cpu_->world_size(); }
  std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts) override;
  void barrier() override;
  bool progresses_only_inside_calls() const override {
    return cpu_->progresses_only_inside_calls() || cuda_->progresses_only_inside_calls();
  }

 private:
  ProcessGroup& for_tensor(const torch::Tensor& tensor) const;
  std::shared_ptr<ProcessGroup> cpu_, cuda_;
};

// Raw-byte broadcast and all-gather through a group that carries CPU tensors.
struct RawExchange {
  std::function<void(void* data, std::size_t bytes, int root)> broadcast;
  std::function<void(const void* send, void* recv, std::size_t bytes)> all_gather;
};
RawExchange raw_exchange(std::shared_ptr<ProcessGroup> cpu);

}  // namespace moco::dist
