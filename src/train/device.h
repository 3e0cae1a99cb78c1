// defines: select_device (this rank's device), make_world_group (the job's collectives for it)
#pragma once

#include "dist/mpi_process_group.h"

#include <torch/types.h>

#include <memory>

namespace moco::train {

// cuda:<local_rank> when LibTorch sees CUDA devices (an error naming the counts when the node has
// fewer GPUs than ranks), else the CPU.
torch::Device select_device(int local_rank, int local_size);

// The cores this process may run on (its affinity mask): train.threads=0's intra-op threads.
int available_cores();

// All ranks' collectives for tensors on `device`: MPI for CPU tensors; on CUDA, NCCL for device
// tensors (MPI still bootstraps it and carries CPU tensors).
std::shared_ptr<dist::ProcessGroup> make_world_group(torch::Device device, const dist::MpiOptions& options);

}  // namespace moco::train
