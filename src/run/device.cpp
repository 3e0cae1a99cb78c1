#include "run/device.h"

#include "dist/errors.h"  // defines: DistError
#include "dist/mpi_process_group.h"
#include "dist/world_group.h"
#if MOCO_WITH_NCCL
#include "dist/cuda_device_info.h"
#endif

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

namespace moco::run {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int node_core_count() { return std::max(1u, std::thread::hardware_concurrency()); }

std::string affinity_list() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return "unknown";
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    list += (list.empty() ? "" : ",") + (last == cpu ? std::to_string(cpu) : fmt::format("{}-{}", cpu, last));
    cpu = last;
  }
  return list;
}

int rank_cores(int local_size, int cores, int node_cores) {
  if (cores >= node_cores) cores /= std::max(1, local_size);
  return std::max(1, cores);
}

int intra_op_threads(int configured, int local_size, int cores, int node_cores) {
  return configured > 0 ? configured : rank_cores(local_size, cores, node_cores);
}

int data_workers(int configured, torch::Device device, int local_size, int cores, int node_cores) {
  if (configured > 0) return configured;
  if (!device.is_cuda()) return 1;
  return std::max(1, rank_cores(local_size, cores, node_cores) - 1);
}

std::string describe_cores(const std::string& cpus, int local_size, int cores, int node_cores, int threads,
                           int workers) {
  const bool shared = cores >= node_cores && local_size > 1;
  return fmt::format("cpus {} ({} cpu(s){}), {} intra-op thread(s), {} data worker(s)", cpus,
                     rank_cores(local_size, cores, node_cores),
                     shared ? fmt::format(": the node's {} shared by {} local ranks", node_cores, local_size) : "",
                     threads, workers);
}

void log_rank_cores(torch::Device device, int local_size, int threads, int workers) {
  spdlog::info("{}",
               describe_cores(affinity_list(), local_size, available_cores(), node_core_count(), threads, workers));
  // A GPU step of a ResNet-50 takes about as long as a few cores need to decode and augment its
  // batch of JPEGs: with fewer workers the GPU waits on the data.
  if (device.is_cuda() && workers < kFewDataWorkers)
    spdlog::warn(
        "only {} data worker(s) feed {}: the GPU will likely wait on JPEG decoding; give the rank more cores "
        "(--cpus-per-task under Slurm) or set data.workers",
        workers, device.str());
}

int choose_cuda_device(int visible, int local_rank, int local_size, const std::string& cuda_visible_devices) {
  if (visible == 1) return 0;
  if (visible >= local_size) return local_rank;
  throw std::runtime_error(fmt::format(
      "local rank {} of {} on this node sees {} CUDA devices (CUDA_VISIBLE_DEVICES={}): start one rank per GPU, "
      "with each rank seeing either one GPU (srun --gpus-per-task=1) or all of the node's (--gpus-per-node)",
      local_rank, local_size, visible, cuda_visible_devices.empty() ? "unset" : "'" + cuda_visible_devices + "'"));
}

namespace {

std::string visible_devices_variable() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return visible == nullptr ? "" : visible;
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "(unknown)");
  return host;
}

// Current from now on for this thread, which makes every later CUDA call of the rank (LibTorch's,
// NCCL's, MPI's) land on its own GPU instead of creating a context on GPU 0.
void make_current(int index) {
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->setDevice(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)));
}

}  // namespace

std::optional<EarlyDevice> choose_device_before_mpi(const dist::EnvMap& env) {
  try {
    auto launcher = dist::launcher_local_rank(env);
    if (!launcher || !torch::cuda::is_available()) return std::nullopt;
    // The size may be unknown (Slurm without a per-node list): then it is at least the rank's.
    const int local_size = std::max(launcher->local_size.value_or(0), launcher->local_rank + 1);
    const int index = choose_cuda_device(static_cast<int>(torch::cuda::device_count()), launcher->local_rank,
                                         local_size, visible_devices_variable());
    make_current(index);
    return EarlyDevice{std::move(*launcher), index};
  } catch (const std::exception&) {
    return std::nullopt;  // select_device fails the same way, once MPI can take every rank down
  }
}

void check_early_device(const EarlyDevice& early, const dist::WorldInfo& world, int index_from_mpi,
                        const std::string& host) {
  if (early.launcher.local_rank == world.local_rank && early.index == index_from_mpi) return;
  throw dist::DistError(
      world.rank,
      fmt::format("on host {}, the launcher's {}={} made cuda:{} current before MPI started, but MPI's node-local "
                  "rank is {} of {}, which picks cuda:{}: the launcher and MPI disagree about the ranks of this "
                  "node, and two ranks may drive one GPU (is the binary linked against the launcher's MPI?)",
                  host, early.launcher.variable, early.launcher.local_rank, early.index, world.local_rank,
                  world.local_size, index_from_mpi));
}

void check_precision_for_device(const Config& c, torch::Device device, const std::string& where) {
  require(c.train.precision != Precision::kFp16 || device.is_cuda(), where, "train.precision",
          fmt::format("fp16 needs a CUDA device, and this rank's is {} (LibTorch's CPU autocast has no float16): "
                      "train.precision=bf16 or fp32 there",
                      device.str()));
}

torch::Device select_device(const dist::WorldInfo& world, const std::optional<EarlyDevice>& early) {
  if (!torch::cuda::is_available()) return torch::kCPU;
  const auto index = choose_cuda_device(static_cast<int>(torch::cuda::device_count()), world.local_rank,
                                        world.local_size, visible_devices_variable());
  if (early) check_early_device(*early, world, index, host_name());
  make_current(index);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string describe_placement(const dist::WorldInfo& world, torch::Device device,
                               const std::optional<EarlyDevice>& early) {
  auto line = fmt::format("rank {}/{} on host {}, local rank {}/{}, device {}", world.rank, world.world_size,
                          host_name(), world.local_rank, world.local_size, device.str());
#if MOCO_WITH_NCCL
  if (device.is_cuda()) line += " (" + dist::cuda_device_summary(device.index()) + ")";
#endif
  if (early)
    line += fmt::format(", chosen before MPI started from {}={}", early->launcher.variable, early->launcher.local_rank);
  return line;
}

void use_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& b : module.buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(torch::MemoryFormat::ChannelsLast));
}

std::shared_ptr<dist::ProcessGroup> make_job_group(const Config& config, int world_size, torch::Device device) {
  if (world_size == 1 && !config.dist.world_group_at_one) {
    spdlog::info("collectives: none (a world of one; dist.world_group_at_one=true takes the MPI group)");
    return std::make_shared<dist::LocalProcessGroup>();
  }
  spdlog::info("collectives: MPI{} across {} rank(s)", device.is_cuda() ? ", NCCL for CUDA tensors" : "", world_size);
  dist::MpiOptions options;
  options.check_collectives = config.dist.check_collectives;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config.dist.timeout_s * 1000));
  return dist::make_world_group(device, options, config.train.output_dir);
}

torch::Tensor to_device(const torch::Tensor& batch, torch::Device device, bool channels_last) {
  auto moved = batch.to(device, /*non_blocking=*/batch.is_pinned());
  return channels_last ? moved.contiguous(torch::MemoryFormat::ChannelsLast) : moved;
}

}  // namespace moco::run
