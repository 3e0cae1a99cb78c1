#include "dist/device_dispatch_group.h"

#include <torch/torch.h>

#include <cstring>
#include <stdexcept>

namespace moco::dist {

DeviceDispatchGroup::DeviceDispatchGroup(std::shared_ptr<ProcessGroup> cpu, std::shared_ptr<ProcessGroup> cuda)
    : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {
  if (!cpu_ || !cuda_) throw std::invalid_argument("DeviceDispatchGroup needs both backends");
  if (cpu_->rank() != cuda_->rank() || cpu_->world_size() != cuda_->world_size())
    throw std::invalid_argument("DeviceDispatchGroup: the two backends number the ranks differently");
}

ProcessGroup& DeviceDispatchGroup::for_tensor(const torch::Tensor& tensor) const {
  return tensor.is_cuda() ? *cuda_ : *cpu_;
}

std::shared_ptr<Work> DeviceDispatchGroup::all_reduce_async(torch::Tensor& tensor, ReduceOp op) {
  return for_tensor(tensor).all_reduce_async(tensor, op);
}

std::shared_ptr<Work> DeviceDispatchGroup::all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) {
  return for_tensor(tensor).all_reduce_async_preagreed(tensor, op);
}

torch::Tensor DeviceDispatchGroup::all_gather(const torch::Tensor& tensor) {
  return for_tensor(tensor).all_gather(tensor);
}

void DeviceDispatchGroup::broadcast(torch::Tensor& tensor, int root) { for_tensor(tensor).broadcast(tensor, root); }

torch::Tensor DeviceDispatchGroup::all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                                              const std::vector<int64_t>& recv_counts) {
  return for_tensor(input).all_to_all(input, send_counts, recv_counts);
}

void DeviceDispatchGroup::barrier() {
  cuda_->barrier();  // waits for the GPU collectives too
  cpu_->barrier();
}

RawExchange raw_exchange(std::shared_ptr<ProcessGroup> cpu) {
  RawExchange exchange;
  exchange.broadcast = [cpu](void* data, std::size_t bytes, int root) {
    auto t = torch::from_blob(data, {static_cast<int64_t>(bytes)}, torch::kUInt8);
    cpu->broadcast(t, root);
  };
  exchange.all_gather = [cpu](const void* send, void* recv, std::size_t bytes) {
    const auto t = torch::from_blob(const_cast<void*>(send), {1, static_cast<int64_t>(bytes)}, torch::kUInt8);
    const auto all = cpu->all_gather(t).contiguous();
    std::memcpy(recv, all.data_ptr(), all.nbytes());
  };
  return exchange;
}

}  // namespace moco::dist
