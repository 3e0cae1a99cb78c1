#include "train/device.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace moco::train {

torch::Device select_device(int local_rank, int local_size) {
  if (!torch::cuda::is_available()) return torch::kCPU;
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus < local_size)
    throw std::runtime_error("this node runs " + std::to_string(local_size) + " ranks but has " + std::to_string(gpus) +
                             " CUDA devices: start at most one rank per GPU");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

std::shared_ptr<dist::ProcessGroup> make_world_group(torch::Device device, const dist::MpiOptions& options) {
  if (device.is_cuda()) {
    throw std::runtime_error("multi-rank training on CUDA needs the NCCL process group, not wired into moco_dist yet; "
                             "run on CPU or with one rank");
  }
  return std::make_shared<dist::MpiProcessGroup>(options);
}

}  // namespace moco::train
