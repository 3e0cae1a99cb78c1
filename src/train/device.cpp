#include "train/device.h"

#include "dist/mpi_process_group.h"
#include "dist/world_group.h"

#include <torch/torch.h>

#include <sched.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

namespace moco::train {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int node_core_count() { return std::max(1u, std::thread::hardware_concurrency()); }

int data_workers(int configured, torch::Device device, int local_size, int cores, int node_cores) {
  if (configured > 0) return configured;
  if (!device.is_cuda()) return 1;
  if (cores >= node_cores) cores /= std::max(1, local_size);
  return std::max(1, cores - 1);
}

torch::Device select_device(int local_rank, int local_size) {
  if (!torch::cuda::is_available()) return torch::kCPU;
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus < local_size)
    throw std::runtime_error("this node runs " + std::to_string(local_size) + " ranks but has " + std::to_string(gpus) +
                             " CUDA devices: start at most one rank per GPU");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

void use_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& b : module.buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(torch::MemoryFormat::ChannelsLast));
}

std::shared_ptr<dist::ProcessGroup> make_job_group(const Config& config, int world_size, torch::Device device) {
  if (world_size == 1) return std::make_shared<dist::LocalProcessGroup>();
  dist::MpiOptions options;
  options.check_collectives = config.dist.check_collectives;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.dist.timeout_s * 1000));
  return dist::make_world_group(device, options);
}

torch::Tensor to_device(const torch::Tensor& batch, torch::Device device, bool channels_last) {
  auto moved = batch.to(device, /*non_blocking=*/batch.is_pinned());
  return channels_last ? moved.contiguous(torch::MemoryFormat::ChannelsLast) : moved;
}

}  // namespace moco::train
