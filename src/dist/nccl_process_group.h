// defines: NcclProcessGroup (ProcessGroup over NCCL, for CUDA tensors), NcclWork (a collective on the
// NCCL stream, with a device-side and a deadline-bounded host-side wait), HostExchange (the host
// collectives it bootstraps and checks with), NcclOptions, nccl_dtype
#pragma once

#include "dist/collective_check.h"
#include "dist/process_group.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// Forward declarations as the CUDA and NCCL headers spell them, so that code constructing the group
// does not compile the CUDA headers.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace moco::dist {

// Host-side collectives over the same ranks, typically MPI_Bcast / MPI_Allgather. They carry the
// NCCL unique id at construction and the per-collective descriptors that catch mismatched calls.
struct HostExchange {
  // Overwrites `bytes` bytes at `data` on every rank with root's.
  std::function<void(void* data, std::size_t bytes, int root)> broadcast;
  // recv holds world_size * bytes: every rank's `bytes` bytes of send, in rank order.
  std::function<void(const void* send, void* recv, std::size_t bytes)> all_gather;
};

struct NcclOptions {
  // As MpiOptions::check_collectives: before each collective the ranks all-gather a 128-byte
  // descriptor (sequence number, op, dtype, shape, root; for all_to_all also the counts) through
  // HostExchange::all_gather, and every rank throws DistError naming the ranks that disagree. NCCL
  // itself would hang or read out of bounds instead. Unlike MPI's check, once per distinct collective
  // (AgreedCollectives): each check is a host rendezvous, which would stall the GPU's launch queue
  // every step.
  bool check_collectives = true;
  // How long a host-side wait (NcclWork::wait_host, barrier, teardown) lets a collective run before
  // it aborts the communicator. As in c10d: a peer that died or diverged otherwise hangs the job.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // The watchdog (dist/nccl_watchdog.h) also times out every collective after `timeout`, from its
  // own thread, and aborts the communicator; if the process has not ended this long after such a
  // fault, the watchdog ends it (abort_world).
  std::chrono::milliseconds abort_grace = std::chrono::seconds(10);
  // A folder (the run's) for this rank's NCCL INFO log, rank<R>.nccl.log, so that the rank log can
  // name the transport NCCL chose (dist/nccl_transport_log.h; NCCL has no API for it). NCCL_DEBUG is
  // set only where the user left it unset. The group then runs one all-reduce while it is made:
  // NCCL connects the ranks at their first collective, and logs how. Empty: neither. The same on
  // every rank, as that all-reduce is collective.
  std::string transport_log_dir;
};

// The ncclDataType_t for a dtype, as an int so that nccl.h stays out of this header; nullopt for a
// dtype NCCL cannot carry (bool, complex, int8/int16 beyond what NCCL defines).
std::optional<int> nccl_dtype(torch::ScalarType dtype);

namespace detail {
struct NcclComm;
}

// A collective launched on the group's NCCL stream. Keeps its tensors alive until destroyed.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<detail::NcclComm> comm, std::shared_ptr<CUevent_st> done, cudaStream_t caller_stream,
           std::vector<torch::Tensor> keep_alive, std::string what);
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  // Orders later work on the caller's current stream after the collective; returns without waiting
  // for the GPU. Throws DistError if NCCL has already reported an asynchronous error.
  void wait() override;
  // Blocks the host until the collective has finished on the GPU. Polls NCCL for asynchronous errors
  // meanwhile; on an error, or when `timeout` passes, aborts the communicator and throws DistError.
  void wait_host(std::chrono::milliseconds timeout);
  void wait_host();  // with NcclOptions::timeout

 private:
  std::shared_ptr<detail::NcclComm> comm_;
  std::shared_ptr<CUevent_st> done_;  // shared with the watchdog, which may query it after this Work
  cudaStream_t caller_stream_;
  std::vector<torch::Tensor> keep_alive_;
  std::string what_;  // "all_reduce #12", for error messages
  bool waited_ = false;
};

// NCCL collectives for CUDA tensors on one device per rank. Construction is collective: every rank
// constructs its group with the same world size, its own rank and device. A collective is ordered
// after the work already queued on the caller's current stream and runs on a dedicated stream, so
// compute queued after it can overlap; wait() orders the caller's stream after it without a host
// sync. After any NCCL error or timeout the communicator is aborted and every later call throws.
// A watchdog thread watches each collective until it completes (see NcclOptions::timeout). The
// communicator is non-blocking (NCCL >= 2.14), so its setup too is bounded by the timeout.
// Threads: as MpiProcessGroup, one collective at a time per group; a Work may be waited on from
// another thread.
class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int world_size, HostExchange host, int device, NcclOptions options = {});
  ~NcclProcessGroup() override;
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }

  // The Work is an NcclWork, for callers that want wait_host().
  std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts) override;
  // Blocks the host until every rank has reached it and all earlier collectives have finished.
  void barrier() override;

 private:
  int64_t begin();
  static std::string name(CollectiveOp op, int64_t seq);
  std::string tensor_problem(const torch::Tensor& tensor, bool in_place) const;
  // True when the ranks exchanged descriptors (the first call of its kind), false when skipped.
  bool agree(CollectiveDescriptor descriptor, const std::string& problem, bool exchange = true);
  std::shared_ptr<Work> start_all_reduce(torch::Tensor& tensor, ReduceOp op, bool agree_first);
  void check_devices();
  void log_transport(const std::string& nccl_log);

  int rank_;
  int world_size_;
  int device_;
  HostExchange host_;
  AgreedCollectives agreed_;  // checked once per kind (see AgreedCollectives)
  NcclOptions options_;
  int64_t seq_ = 0;  // collectives started, for messages and the descriptors
  std::shared_ptr<detail::NcclComm> comm_;
};

}  // namespace moco::dist
