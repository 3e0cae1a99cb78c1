// defines: choose_cuda_device / choose_device_before_mpi / check_early_device / select_device (this
// rank's device), check_precision_for_device, describe_placement (its log line), available_cores / node_core_count /
// affinity_list, rank_cores (a rank's share of the node) and the train.threads / data.workers it resolves,
// describe_cores / log_rank_cores (its cores line),
// use_channels_last, to_device (a batch onto the device, in the memory order asked for)
#pragma once

#include "dist/bootstrap.h"
#include "dist/process_group.h"
#include "run/config.h"

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>

namespace moco::run {

// The index of the CUDA device a rank drives among the `visible` ones (visible >= 1):
//  - one visible: 0, whatever the local rank (the launcher bound each rank to its own GPU, e.g.
//    `srun --gpus-per-task=1` or a site's --gpu-bind, so CUDA_VISIBLE_DEVICES names one);
//  - at least `local_size` visible: `local_rank` (every rank sees the node's GPUs);
//  - otherwise throws, naming `cuda_visible_devices` (the variable's value, "" when unset), the
//    visible count and the local rank and size: a rank would drive a GPU past the visible ones, or
//    share one with another rank.
// Pure: the tests feed it every case.
int choose_cuda_device(int visible, int local_rank, int local_size, const std::string& cuda_visible_devices);

// The CUDA device chosen before MPI started, from the launcher's local rank.
struct EarlyDevice {
  dist::LauncherLocalRank launcher;
  int index = 0;
};

// Call before dist::init_world. MPI_Init_thread of a CUDA-aware MPI (Open MPI's smcuda, UCX) may
// create a CUDA context on the current device, which for a process that has chosen none is GPU 0, on
// every rank of the node. So the device is chosen first from the launcher's local rank
// (dist::launcher_local_rank) by choose_cuda_device, and made current. nullopt, with nothing done,
// where LibTorch sees no CUDA device (the CPU), no launcher names a local rank (a plain process), or
// the choice fails: select_device then decides, and reports the failure with MPI up to end every rank.
std::optional<EarlyDevice> choose_device_before_mpi(const dist::EnvMap& env = dist::launcher_env());

// Throws DistError naming the rank, `host`, both local ranks and both devices unless the device chosen
// before MPI is the one MPI's node-local rank picks (`index_from_mpi`, choose_cuda_device's): the
// launcher and MPI disagree about the ranks of this node, and two ranks may be driving one GPU. Pure.
void check_early_device(const EarlyDevice& early, const dist::WorldInfo& world, int index_from_mpi,
                        const std::string& host);

// This rank's device, made the current CUDA device before anything else touches CUDA (so that no
// context is created on a GPU another rank owns): choose_cuda_device's for MPI's node-local rank when
// LibTorch sees CUDA devices, else the CPU. With `early`, first checks it (check_early_device).
torch::Device select_device(const dist::WorldInfo& world, const std::optional<EarlyDevice>& early = std::nullopt);

// train.precision fp16 on a `device` that is not CUDA: ConfigError naming the key, `where` (the config
// file) and the device (LibTorch's CPU autocast has no float16), before anything is written.
void check_precision_for_device(const Config& config, torch::Device device, const std::string& where);

// "rank R/W on host H, local rank L/S, device D[ (name, PCI id)][, chosen before MPI started from
// VAR=L]": which machine and GPU a rank runs on, for its log.
std::string describe_placement(const dist::WorldInfo& world, torch::Device device,
                               const std::optional<EarlyDevice>& early = std::nullopt);

// The job's collectives for `device`: a LocalProcessGroup alone (unless dist.world_group_at_one),
// else the world group (MPI, and NCCL for CUDA tensors) with the config's collective checks and
// timeout (dist.*); NCCL's log goes to train.output_dir (dist::NcclOptions::transport_log_dir).
std::shared_ptr<dist::ProcessGroup> make_job_group(const Config& config, int world_size, torch::Device device);

// The cores this process may run on (its affinity mask).
int available_cores();
// The cores of the whole node, whatever this process may use of them.
int node_core_count();
// This process's affinity mask as a CPU list ("0-3,8"), as taskset and Slurm write it.
std::string affinity_list();

// The cores that are this rank's: a rank the launcher bound to its cores (an affinity mask smaller
// than the node) uses those; an unbound one (its mask is the whole node) shares the node's cores
// with the other local_size - 1 ranks on it, or 8 ranks of a node would each run a thread per core.
// At least one. `cores`: this rank's affinity mask's, `node_cores`: the node's.
int rank_cores(int local_size, int cores, int node_cores);

// train.threads = 0 resolved: the intra-op threads are this rank's cores (rank_cores).
int intra_op_threads(int configured, int local_size, int cores = available_cores(), int node_cores = node_core_count());

// data.workers = 0 resolved: on CUDA, every core of this rank (rank_cores) but one (the training
// thread's); on the CPU the cores compute the step itself, so one.
int data_workers(int configured, torch::Device device, int local_size, int cores = available_cores(),
                 int node_cores = node_core_count());

// Fewer data workers than this on a CUDA rank draw a warning (log_rank_cores).
inline constexpr int kFewDataWorkers = 4;
// The rank's start line on its cores: "cpus 0-3 (4 cpu(s)), 4 intra-op thread(s), 3 data worker(s)",
// saying when the cpus are the node's, shared with other local ranks.
std::string describe_cores(const std::string& cpus, int local_size, int cores, int node_cores, int threads,
                           int workers);
// Logs describe_cores for this process, and warns a CUDA rank with fewer than kFewDataWorkers workers
// which settings give it more.
void log_rank_cores(torch::Device device, int local_size, int threads, int workers);

// Every 4-d parameter and buffer of `module` (the convolution weights) in channels-last order. The
// values and shapes are unchanged; only the memory order, which convolutions on tensor cores prefer.
void use_channels_last(torch::nn::Module& module);

// A host batch onto `device`: asynchronously from pinned memory, channels-last when asked.
torch::Tensor to_device(const torch::Tensor& batch, torch::Device device, bool channels_last);

}  // namespace moco::run
