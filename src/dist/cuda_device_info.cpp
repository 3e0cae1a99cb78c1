#include "dist/cuda_device_info.h"

#include <cuda_runtime.h>

namespace moco::dist {

std::string cuda_device_summary(int device) {
  cudaDeviceProp properties{};
  if (const auto e = cudaGetDeviceProperties(&properties, device); e != cudaSuccess)
    return std::string("properties unknown: ") + cudaGetErrorString(e);
  char bus_id[32] = {};
  if (const auto e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device); e != cudaSuccess)
    return std::string(properties.name) + ", PCI bus id unknown: " + cudaGetErrorString(e);
  return std::string(properties.name) + ", PCI " + bus_id;
}

}  // namespace moco::dist
