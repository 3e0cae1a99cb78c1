// defines: select_device (this rank's device), available_cores / node_core_count / data_workers,
// use_channels_last, to_device (a batch onto the device, in the memory order asked for)
#pragma once

#include "dist/process_group.h"
#include "train/config.h"

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>

namespace moco::train {

// cuda:<local_rank> when LibTorch sees CUDA devices (an error naming the counts when the node has
// fewer GPUs than ranks), else the CPU.
torch::Device select_device(int local_rank, int local_size);

// The job's collectives for `device`: a LocalProcessGroup alone, else the world group (MPI, and
// NCCL for CUDA tensors) with the config's collective checks and timeout (dist.*).
std::shared_ptr<dist::ProcessGroup> make_job_group(const Config& config, int world_size, torch::Device device);

// The cores this process may run on (its affinity mask): train.threads=0's intra-op threads.
int available_cores();
// The cores of the whole node, whatever this process may use of them.
int node_core_count();

// data.workers = 0 resolved: on CUDA, every core this rank may use but one (the training thread's);
// on the CPU the cores compute the step itself, so one. A rank the launcher bound to its cores
// (an affinity mask smaller than the node) uses those; an unbound one shares the node's cores with
// the other local_size - 1 ranks on the node. `cores`: this rank's (its affinity mask), `node_cores`:
// the node's.
int data_workers(int configured, torch::Device device, int local_size, int cores = available_cores(),
                 int node_cores = node_core_count());

// Every 4-d parameter and buffer of `module` (the convolution weights) in channels-last order. The
// values and shapes are unchanged; only the memory order, which convolutions on tensor cores prefer.
void use_channels_last(torch::nn::Module& module);

// A host batch onto `device`: asynchronously from pinned memory, channels-last when asked.
torch::Tensor to_device(const torch::Tensor& batch, torch::Device device, bool channels_last);

}  // namespace moco::train
