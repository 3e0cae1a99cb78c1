// defines: make_world_group (the job's collectives for this rank's device)
#pragma once

#include "dist/mpi_process_group.h"

#include <torch/types.h>

#include <memory>
#include <string>

namespace moco::dist {

// All ranks' collectives for tensors on `device`: MPI for CPU tensors; on CUDA, NCCL for device
// tensors (MPI still bootstraps it and carries CPU tensors). `run_dir`, the same on every rank: where
// NCCL's log goes and what the rank log says of its transport (NcclOptions::transport_log_dir).
std::shared_ptr<ProcessGroup> make_world_group(torch::Device device, const MpiOptions& options,
                                               const std::string& run_dir = "");

}  // namespace moco::dist
