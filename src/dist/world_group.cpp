#include "dist/world_group.h"

#include "dist/device_dispatch_group.h"
#if MOCO_WITH_NCCL
#include "dist/nccl_process_group.h"
#endif

#include <stdexcept>

namespace moco::dist {

std::shared_ptr<ProcessGroup> make_world_group(torch::Device device, const MpiOptions& options,
                                               const std::string& run_dir) {
  auto mpi = std::make_shared<MpiProcessGroup>(options);
  if (!device.is_cuda()) return mpi;
#if MOCO_WITH_NCCL
  NcclOptions nccl_options;
  nccl_options.check_collectives = options.check_collectives;
  nccl_options.timeout = options.timeout;
  nccl_options.transport_log_dir = run_dir;
  const auto raw = raw_exchange(mpi);
  auto nccl = std::make_shared<NcclProcessGroup>(
      mpi->rank(), mpi->world_size(), HostExchange{raw.broadcast, raw.all_gather}, device.index(), nccl_options);
  return std::make_shared<DeviceDispatchGroup>(mpi, nccl);
#else
  (void)run_dir;
  throw std::runtime_error(
      "this moco_dist was built without NCCL (MOCO_WITH_NCCL=OFF): it cannot train several ranks on CUDA");
#endif
}

}  // namespace moco::dist
