#include "dist/nccl_process_group.h"

#include "dist/bootstrap.h"         // defines: abort_world
#include "dist/collective_check.h"  // defines: describe_collective, find_disagreement, ...
#include "dist/cuda_current_stream.h"
#include "dist/cuda_errors.h"         // defines: CUDA_CHECK_ON_RANK, NCCL_CHECK_ON_RANK, NCCL_LAUNCH_CHECK_ON_RANK
#include "dist/errors.h"              // defines: DistError
#include "dist/nccl_transport_log.h"  // defines: plan_nccl_debug_log, summarize_nccl_transports
#include "dist/nccl_watchdog.h"
#include "dist/running_deadline.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>
#include <utility>

namespace moco::dist {

std::optional<int> nccl_dtype(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat16:
      return ncclFloat16;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    case torch::kBFloat16:
      return ncclBfloat16;
#endif
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kInt64:
      return ncclInt64;
    case torch::kInt32:
      return ncclInt32;
    case torch::kUInt8:
      return ncclUint8;
    case torch::kInt8:
      return ncclInt8;
    default:
      return std::nullopt;
  }
}

namespace detail {
namespace {

// Makes the rank's device the calling thread's current one, and leaves it so. A rank owns one
// device: switching back to whatever was current before would, for a thread that never chose one,
// make device 0 current and (CUDA 12 and later) create a context there, on a GPU another rank owns.
class DeviceGuard {
 public:
  DeviceGuard(int device, int rank) {
    int current = -1;
    CUDA_CHECK_ON_RANK(rank, cudaGetDevice(&current));
    if (current != device) CUDA_CHECK_ON_RANK(rank, cudaSetDevice(device));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
};

struct EventDeleter {
  void operator()(CUevent_st* event) const { cudaEventDestroy(event); }
};
using Event = std::unique_ptr<CUevent_st, EventDeleter>;

Event make_event(int rank) {
  cudaEvent_t event = nullptr;
  // Timing would make every record heavier; the events only order streams.
  CUDA_CHECK_ON_RANK(rank, cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event);
}

// A collective's completion event as the watchdog queries it, from its own thread.
class EventWork final : public WatchedWork {
 public:
  explicit EventWork(std::shared_ptr<CUevent_st> event) : event_(std::move(event)) {}
  State state() override {
    last_ = cudaEventQuery(event_.get());
    if (last_ == cudaSuccess) return State::kDone;
    return last_ == cudaErrorNotReady ? State::kPending : State::kFailed;
  }
  std::string failure() override { return "cudaEventQuery failed: " + cuda_error_text(last_); }

 private:
  std::shared_ptr<CUevent_st> event_;
  cudaError_t last_ = cudaSuccess;
};

// The watchdog's end of a rank whose communicator it aborted and that did not end by itself: as an
// MPI timeout's, abort_world. MPI_Abort from this thread may wait on a lock that the blocked thread
// holds inside MPI (the library is only MPI_THREAD_SERIALIZED), so a timer ends the process anyway.
[[noreturn]] void end_after_fault(int rank, std::chrono::milliseconds grace, const std::string& fault) {
  spdlog::critical("rank {}: NCCL watchdog: the process has not ended {} ms after the fault; ending it", rank,
                   grace.count());
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(1);
  }).detach();
  abort_world("rank " + std::to_string(rank) + ": NCCL watchdog: " + fault, 1);
}

}  // namespace

// The communicator and its stream, shared by the group and its in-flight Work so that neither
// outlives the other's needs. The mutex serialises NCCL calls: a communicator is not thread-safe,
// and a Reducer may launch from autograd threads while another thread waits, and the watchdog's
// thread asks for the asynchronous error and aborts. Lock order: mutex, then the watchdog's own.
// The watchdog only tries the mutex (run_if_unlocked): a launch holds it, and a launch can block
// behind the very collective the watchdog must time out.
struct NcclComm final : WatchedComm {
  NcclComm(int rank_, int device_, const NcclOptions& options)
      : rank(rank_),
        device(device_),
        timeout(options.timeout),
        watchdog(
            WatchdogOptions{rank_, options.timeout, options.abort_grace, std::chrono::milliseconds(100)}, *this, clock,
            [rank_, grace = options.abort_grace](const std::string& fault) { end_after_fault(rank_, grace, fault); }) {}

  int rank = 0;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* barrier_buffer = nullptr;  // one float on the device: the barrier's all-reduce operand
  std::mutex mutex;
  RunningClock clock;
  Watchdog watchdog;  // after clock and mutex, which it uses; stopped first in the destructor

  // WatchedComm, for the watchdog's thread (and fail()'s abort).
  bool try_async_error(std::optional<std::string>& error) override {
    return run_if_unlocked(mutex, [&] {
      if (progress_locked() == CommProgress::kError) error = error_text_locked();
    });
  }
  bool try_abort() override {
    return run_if_unlocked(mutex, [this] { abort_locked(); });
  }
  void bind_thread() override { cudaSetDevice(device); }

  // ncclCommGetAsyncError as wait_until_settled reads it. Caller holds mutex.
  CommProgress progress_locked() {
    ncclResult_t state = ncclSuccess;
    if (comm == nullptr || ncclCommGetAsyncError(comm, &state) != ncclSuccess) return CommProgress::kError;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    if (state == ncclInProgress) return CommProgress::kInProgress;
#endif
    return state == ncclSuccess ? CommProgress::kReady : CommProgress::kError;
  }
  std::string error_text_locked() {
    ncclResult_t state = ncclSuccess;
    if (comm == nullptr) return "the communicator is gone";
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    return nccl_error_text(rc != ncclSuccess ? rc : state);
  }

  // Throws the fault that aborted the communicator, or NCCL's asynchronous error after failing the
  // group with it. `lock` holds mutex.
  void check_healthy(std::unique_lock<std::mutex>& lock, const std::string& what) {
    if (auto fault = watchdog.fault())
      throw DistError(rank, what + ": the NCCL communicator was aborted earlier: " + *fault);
    if (progress_locked() == CommProgress::kError)
      fail(lock, what + ": NCCL reported an asynchronous error: " + error_text_locked());
  }

  // Through the watchdog, so that the fault is the same for every thread and the abort happens once.
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& reason) {
    lock.unlock();  // the watchdog aborts through try_abort(), which needs mutex free
    throw DistError(rank, watchdog.fail(reason));
  }

  // A non-blocking communicator may still be enqueueing a launch: the done event must be recorded
  // after it, and nothing else may be called on the communicator meanwhile. `lock` holds mutex.
  void settle(std::unique_lock<std::mutex>& lock, const std::string& what) {
    const CommProgress settled =
        wait_until_settled([this] { return progress_locked(); }, clock, timeout, std::chrono::microseconds(20));
    if (settled == CommProgress::kError) fail(lock, what + ": NCCL reported an error: " + error_text_locked());
    if (settled == CommProgress::kInProgress)
      fail(lock, what + " was still being enqueued after " + std::to_string(timeout.count()) + " ms");
  }

  void init(int world_size, const ncclUniqueId& id);

  // ncclCommAbort, not ncclCommDestroy: destroy waits for the pending collectives, which with a dead
  // peer never finish. Aborting makes this rank's kernels return so the error can propagate.
  void abort_locked() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  ~NcclComm() override {
    watchdog.stop();  // its thread uses this object
    int current = -1;
    // A failure here means the CUDA runtime is being unloaded at exit: touching it again can crash.
    if (cudaGetDevice(&current) != cudaSuccess) return;
    if (current != device) cudaSetDevice(device);  // and left so: see DeviceGuard
    if (comm != nullptr) {
      // Let collectives still on the stream finish so peers are not left waiting on this rank, but
      // no longer than a collective may take; then abort rather than hang in ncclCommDestroy.
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      bool finished = false;
      for (;;) {
        const cudaError_t state = cudaStreamQuery(stream);
        if (state == cudaSuccess) {
          finished = true;
          break;
        }
        if (state != cudaErrorNotReady || progress_locked() == CommProgress::kError ||
            std::chrono::steady_clock::now() > deadline) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
      // A non-blocking communicator finalizes in the background: bounded, as everything else.
      if (finished) {
        const ncclResult_t rc = ncclCommFinalize(comm);
        finished = (rc == ncclSuccess || rc == ncclInProgress) &&
                   wait_until_settled([this] { return progress_locked(); }, clock, timeout) == CommProgress::kReady;
      }
#endif
      if (finished) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (barrier_buffer != nullptr) cudaFree(barrier_buffer);
  }
};

// Makes the communicator. Non-blocking where NCCL can (>= 2.14): ncclCommInitRank blocks without a
// limit while a peer never arrives, so the setup is polled and aborted past the timeout instead.
void NcclComm::init(int world_size, const ncclUniqueId& id) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  const CommProgress settled = rc == ncclSuccess || rc == ncclInProgress
                                   ? wait_until_settled([this] { return progress_locked(); }, clock, timeout)
                                   : CommProgress::kError;
  if (settled == CommProgress::kReady) return;
  const std::string why =
      settled == CommProgress::kInProgress
          ? "did not finish within " + std::to_string(timeout.count()) +
                " ms; a peer rank has probably died or never reached the NCCL setup"
          : "failed: " + (rc != ncclSuccess && rc != ncclInProgress ? nccl_error_text(rc) : error_text_locked());
  abort_locked();
  throw DistError(rank, "ncclCommInitRankConfig " + why + " (this rank aborted its NCCL communicator)");
#else
  NCCL_CHECK_ON_RANK(rank, ncclCommInitRank(&comm, world_size, id, rank));
#endif
}

namespace {

// Runs one collective on the NCCL stream, ordered after the caller's current stream: the caller's
// stream records `ready`, the NCCL stream waits on it, `launch` enqueues the NCCL calls, and the
// NCCL stream records `done`, which the returned Work and the watchdog wait on.
template <typename Launch>
std::shared_ptr<NcclWork> run_collective(const std::shared_ptr<NcclComm>& comm, std::string what,
                                         std::vector<torch::Tensor> keep_alive, Launch&& launch) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  comm->check_healthy(lock, what);
  const int rank = comm->rank;
  DeviceGuard guard(comm->device, rank);
  const cudaStream_t caller = current_cuda_stream(comm->device);
  Event ready = make_event(rank);
  CUDA_CHECK_ON_RANK(rank, cudaEventRecord(ready.get(), caller));
  CUDA_CHECK_ON_RANK(rank, cudaStreamWaitEvent(comm->stream, ready.get(), 0));
  launch(comm->comm, comm->stream);
  comm->settle(lock, what);
  std::shared_ptr<CUevent_st> done(make_event(rank).release(), EventDeleter{});
  CUDA_CHECK_ON_RANK(rank, cudaEventRecord(done.get(), comm->stream));
  comm->watchdog.watch(what, noted_step(), std::make_shared<EventWork>(done));
  return std::make_shared<NcclWork>(comm, std::move(done), caller, std::move(keep_alive), std::move(what));
}

// ncclGroupEnd must follow ncclGroupStart even when a call between them throws, or every later
// NCCL call of this thread joins the broken group.
class NcclGroup {
 public:
  explicit NcclGroup(int rank) : rank_(rank) { NCCL_CHECK_ON_RANK(rank_, ncclGroupStart()); }
  void end() {
    ended_ = true;
    NCCL_LAUNCH_CHECK_ON_RANK(rank_, ncclGroupEnd());
  }
  ~NcclGroup() {
    if (!ended_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  int rank_;
  bool ended_ = false;
};

}  // namespace
}  // namespace detail

// ---------------------------------------------------------------------------------------------- Work

NcclWork::NcclWork(std::shared_ptr<detail::NcclComm> comm, std::shared_ptr<CUevent_st> done, cudaStream_t caller_stream,
                   std::vector<torch::Tensor> keep_alive, std::string what)
    : comm_(std::move(comm)),
      done_(std::move(done)),
      caller_stream_(caller_stream),
      keep_alive_(std::move(keep_alive)),
      what_(std::move(what)) {}

// Note [Work lifetime without recordStream]
// LibTorch's caching allocator may hand a freed block to new work on the stream it was allocated
// on as soon as the last tensor goes, while NCCL may still use it on its own stream. c10d calls
// recordStream; that needs a CUDA LibTorch, which this file must not. Instead the Work keeps the
// tensors alive, and if nobody waited, orders the launching stream after the collective before
// letting them go, so reuse on that stream comes after NCCL is done with the memory.
// The event itself goes with the last of this Work and the watchdog's entry (destroying it is legal
// while it is pending: its resources are released once it completes).
NcclWork::~NcclWork() {
  if (!waited_ && cudaEventQuery(done_.get()) == cudaErrorNotReady) {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess) {
      if (current != comm_->device) cudaSetDevice(comm_->device);  // and left so: see DeviceGuard
      cudaStreamWaitEvent(caller_stream_, done_.get(), 0);
    }
  }
}

void NcclWork::wait() {
  {
    std::unique_lock<std::mutex> lock(comm_->mutex);
    comm_->check_healthy(lock, what_);
  }
  detail::DeviceGuard guard(comm_->device, comm_->rank);
  CUDA_CHECK_ON_RANK(comm_->rank, cudaStreamWaitEvent(current_cuda_stream(comm_->device), done_.get(), 0));
  waited_ = true;
}

void NcclWork::wait_host() { wait_host(comm_->timeout); }

void NcclWork::wait_host(std::chrono::milliseconds timeout) {
  // c10d's watchdog in the waiting thread: poll rather than cudaEventSynchronize, which would block
  // forever on a collective whose peer is gone.
  RunningDeadline deadline(timeout);
  for (;;) {
    const cudaError_t state = cudaEventQuery(done_.get());
    std::unique_lock<std::mutex> lock(comm_->mutex);
    // Also once the event is done: a collective that the watchdog aborted completes, with garbage.
    comm_->check_healthy(lock, what_);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) {
      throw DistError(comm_->rank, what_ + ": cudaEventQuery failed: " + detail::cuda_error_text(state));
    }
    if (deadline.passed()) {
      comm_->fail(lock, what_ + " did not finish within " + std::to_string(timeout.count()) +
                            " ms; a peer rank has probably died, hung, or called a different collective");
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  waited_ = true;
}

// ------------------------------------------------------------------------------------ ProcessGroup

namespace {

// Before NCCL's first call in this process, which reads its debug settings once: where the user left
// NCCL_DEBUG unset, NCCL's INFO log goes to the run folder (plan_nccl_debug_log). Returns the log to
// read the transport from, or "".
std::string route_nccl_log(int rank, const std::string& dir) {
  if (dir.empty()) return "";
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string short_host(host);  // NCCL's %h: the name up to its first dot
  short_host = short_host.substr(0, short_host.find('.'));
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(dir, ec)
                               ? (std::filesystem::path(dir) / ("rank" + std::to_string(rank) + ".nccl.log")).string()
                               : "";
  const NcclDebugLog plan = plan_nccl_debug_log(nccl_debug_env(), file, short_host, static_cast<int>(getpid()));
  for (const auto& [name, value] : plan.set) setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  if (plan.file.empty()) spdlog::info("rank {}: NCCL transport: not logged: {}", rank, plan.why_none);
  return plan.file;
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(int rank, int world_size, HostExchange host, int device, NcclOptions options)
    : rank_(rank), world_size_(world_size), device_(device), host_(std::move(host)), options_(options) {
  if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
    throw DistError(rank_, "NcclProcessGroup: rank " + std::to_string(rank_) + " is outside world size " +
                               std::to_string(world_size_));
  }
  if (!host_.broadcast || !host_.all_gather) {
    throw DistError(rank_, "NcclProcessGroup needs both HostExchange::broadcast and HostExchange::all_gather");
  }
  check_devices();
  const std::string nccl_log = route_nccl_log(rank_, options_.transport_log_dir);

  comm_ = std::make_shared<detail::NcclComm>(rank_, device_, options_);
  detail::DeviceGuard guard(device_, rank_);

  // The root's ncclGetUniqueId status travels with the id, so its failure reaches every rank.
  struct {
    int32_t status = ncclSuccess;
    ncclUniqueId id;
  } unique{};
  if (rank_ == 0) unique.status = ncclGetUniqueId(&unique.id);
  host_.broadcast(&unique, sizeof(unique), 0);
  if (unique.status != ncclSuccess) {
    throw DistError(rank_, std::string("ncclGetUniqueId failed on rank 0: ") +
                               ncclGetErrorString(static_cast<ncclResult_t>(unique.status)));
  }
  comm_->init(world_size_, unique.id);
  // Non-blocking: the legacy default stream must not serialise with collectives.
  CUDA_CHECK_ON_RANK(rank_, cudaStreamCreateWithFlags(&comm_->stream, cudaStreamNonBlocking));
  CUDA_CHECK_ON_RANK(rank_, cudaMalloc(reinterpret_cast<void**>(&comm_->barrier_buffer), sizeof(float)));
  comm_->watchdog.start();
  if (!options_.transport_log_dir.empty()) log_transport(nccl_log);
}

// Every rank checks its device and learns every other rank's verdict before anyone enters a
// blocking NCCL call, so one rank without a GPU makes all ranks throw instead of the rest hanging.
void NcclProcessGroup::check_devices() {
  std::string local_error;
  int device_count = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&device_count);
  if (count_status != cudaSuccess) {
    local_error = std::string("the NCCL backend needs a CUDA device, but cudaGetDeviceCount failed: ") +
                  cudaGetErrorString(count_status) + " (" + cudaGetErrorName(count_status) + ")";
  } else if (device_ < 0 || device_ >= device_count) {
    local_error = "the NCCL backend needs CUDA device " + std::to_string(device_) + ", but this process sees " +
                  std::to_string(device_count) + " CUDA device(s)";
  }
  const int32_t local_ok = local_error.empty() ? 1 : 0;
  std::vector<int32_t> ok(static_cast<std::size_t>(world_size_));
  host_.all_gather(&local_ok, ok.data(), sizeof(int32_t));
  if (!local_error.empty()) throw DistError(rank_, local_error);
  std::string failed;
  for (int r = 0; r < world_size_; ++r) {
    if (!ok[static_cast<std::size_t>(r)]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty())
    throw DistError(rank_, "NCCL setup abandoned: rank(s) " + failed + " have no usable CUDA device");
}

// Note [Naming the transport]
// NCCL connects two ranks at their first collective (since 2.22; during the setup before) and logs
// the transport of each connection: P2P (NVLink or PCIe), SHM, or NET. One all-reduce here makes it
// connect before training, bounded by the timeout as any collective; the rank log then says what
// NCCL chose (an all-reduce's ring or tree neighbours; collectives that need other pairs, all_to_all,
// connect those later, and their lines stay in the NCCL log alone).
void NcclProcessGroup::log_transport(const std::string& nccl_log) {
  float* buffer = comm_->barrier_buffer;
  detail::run_collective(comm_, "the connecting all-reduce", {}, [&](ncclComm_t comm, cudaStream_t stream) {
    NCCL_LAUNCH_CHECK_ON_RANK(rank_, ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream));
  })->wait_host(options_.timeout);
  if (nccl_log.empty()) return;
  if (world_size_ == 1) {
    spdlog::info("rank {}: NCCL transport: none (a world of one rank)", rank_);
    return;
  }
  std::ifstream in(nccl_log);
  std::stringstream text;
  text << in.rdbuf();
  const std::string summary = summarize_nccl_transports(text.str(), rank_);
  if (!in) {
    spdlog::info(
        "rank {}: NCCL transport: unknown: cannot read {} (NCCL takes its debug settings once per process, "
        "at its first call)",
        rank_, nccl_log);
  } else if (summary.empty()) {
    spdlog::info("rank {}: NCCL transport: unknown: no connection lines in {} (is NCCL_DEBUG_SUBSYS without INIT?)",
                 rank_, nccl_log);
  } else {
    spdlog::info("rank {}: NCCL transport: {} (NCCL's log: {})", rank_, summary, nccl_log);
  }
}

NcclProcessGroup::~NcclProcessGroup() = default;

int64_t NcclProcessGroup::begin() { return ++seq_; }

std::string NcclProcessGroup::name(CollectiveOp op, int64_t seq) {
  return std::string(collective_name(op)) + " #" + std::to_string(seq);
}

// Empty when `tensor` can go to NCCL on this rank, else why not.
std::string NcclProcessGroup::tensor_problem(const torch::Tensor& tensor, bool in_place) const {
  if (!tensor.defined() || !tensor.is_cuda() || tensor.get_device() != device_) {
    return "needs a tensor on cuda:" + std::to_string(device_) + ", got " +
           (tensor.defined() ? "one on " + tensor.device().str() : std::string("an undefined tensor"));
  }
  if (!nccl_dtype(tensor.scalar_type())) return "NCCL cannot carry dtype " + dtype_name(tensor.scalar_type());
  if (in_place && !tensor.is_contiguous()) return "works in place and needs a contiguous tensor";
  return {};
}

// Note [Every rank throws]
// A rank that throws alone leaves the others blocked in the next host exchange or inside NCCL. So a
// call whose arguments this rank rejects still takes part in the descriptor exchange, marked
// invalid: this rank throws its own reason, every other rank throws naming it. Nothing was launched
// on the GPU, so the group stays usable. The messages are the MPI backend's (collective_check.h).
// With check_collectives off there is no exchange and only this rank throws.
bool NcclProcessGroup::agree(CollectiveDescriptor descriptor, const std::string& problem, bool exchange) {
  const std::string what = name(static_cast<CollectiveOp>(descriptor.op), descriptor.seq);
  if (!options_.check_collectives || !exchange) {
    if (!problem.empty()) throw DistError(rank_, what + ": " + problem);
    return false;
  }
  if (problem.empty() && agreed_.contains(descriptor)) return false;
  descriptor.invalid_arguments = problem.empty() ? 0 : 1;
  std::vector<CollectiveDescriptor> all(static_cast<std::size_t>(world_size_));
  host_.all_gather(&descriptor, all.data(), sizeof(CollectiveDescriptor));
  const std::string usable = "; nothing was launched, the group remains usable";
  if (!problem.empty()) throw DistError(rank_, what + ": " + problem + " (every rank throws)" + usable);
  const std::vector<int> invalid = ranks_with_invalid_arguments(all);
  if (!invalid.empty()) {
    throw DistError(rank_, what + ": " + rank_list(invalid) + " rejected " + (invalid.size() == 1 ? "its" : "their") +
                               " arguments (see " + (invalid.size() == 1 ? "its" : "their") + " error)" + usable);
  }
  if (auto disagreement = find_disagreement(all)) throw DistError(rank_, *disagreement + usable);
  agreed_.insert(descriptor);
  return true;
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce_async(torch::Tensor& tensor, ReduceOp op) {
  return start_all_reduce(tensor, op, /*agree_first=*/true);
}

std::shared_ptr<Work> NcclProcessGroup::all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) {
  return start_all_reduce(tensor, op, /*agree_first=*/false);
}

std::shared_ptr<Work> NcclProcessGroup::start_all_reduce(torch::Tensor& tensor, ReduceOp op, bool agree_first) {
  const int64_t seq = begin();
  std::string problem = tensor_problem(tensor, /*in_place=*/true);
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 10, 0)
  if (problem.empty() && op == ReduceOp::kAvg && !tensor.is_floating_point()) {
    problem = "an integer average needs NCCL >= 2.10 (ncclAvg)";
  }
#endif
  agree(describe_collective(CollectiveOp::kAllReduce, seq, &tensor, static_cast<int64_t>(op)), problem, agree_first);
  ncclRedOp_t nccl_op = ncclSum;
  if (op == ReduceOp::kAvg) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    nccl_op = ncclAvg;
#else
    // Scaled before the sum, on the caller's stream, so the collective's ready event covers it.
    tensor.div_(world_size_);
#endif
  }
  const auto dtype = static_cast<ncclDataType_t>(*nccl_dtype(tensor.scalar_type()));
  void* data = tensor.data_ptr();
  const auto count = static_cast<std::size_t>(tensor.numel());
  return detail::run_collective(
      comm_, name(CollectiveOp::kAllReduce, seq), {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
        NCCL_LAUNCH_CHECK_ON_RANK(rank_, ncclAllReduce(data, data, count, dtype, nccl_op, comm, stream));
      });
}

torch::Tensor NcclProcessGroup::all_gather(const torch::Tensor& tensor) {
  const int64_t seq = begin();
  std::string problem = tensor_problem(tensor, /*in_place=*/false);
  if (problem.empty() && tensor.dim() == 0) problem = "concatenates along dim 0 and needs a tensor with dims";
  agree(describe_collective(CollectiveOp::kAllGather, seq, &tensor, 0), problem);
  const torch::Tensor input = tensor.contiguous();
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[0] *= world_size_;
  torch::Tensor output = torch::empty(sizes, input.options());
  const auto dtype = static_cast<ncclDataType_t>(*nccl_dtype(input.scalar_type()));
  const auto count = static_cast<std::size_t>(input.numel());
  const void* send = input.data_ptr();
  void* recv = output.data_ptr();
  detail::run_collective(comm_, name(CollectiveOp::kAllGather, seq), {input, output},
                         [&](ncclComm_t comm, cudaStream_t stream) {
                           NCCL_LAUNCH_CHECK_ON_RANK(rank_, ncclAllGather(send, recv, count, dtype, comm, stream));
                         })
      ->wait();
  return output;
}

void NcclProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  const int64_t seq = begin();
  std::string problem = tensor_problem(tensor, /*in_place=*/true);
  if (problem.empty() && (root < 0 || root >= world_size_)) {
    problem = "root " + std::to_string(root) + " is outside world size " + std::to_string(world_size_);
  }
  agree(describe_collective(CollectiveOp::kBroadcast, seq, &tensor, root), problem);
  const auto dtype = static_cast<ncclDataType_t>(*nccl_dtype(tensor.scalar_type()));
  void* data = tensor.data_ptr();
  const auto count = static_cast<std::size_t>(tensor.numel());
  detail::run_collective(comm_, name(CollectiveOp::kBroadcast, seq), {tensor},
                         [&](ncclComm_t comm, cudaStream_t stream) {
                           NCCL_LAUNCH_CHECK_ON_RANK(rank_,
                                                     ncclBroadcast(data, data, count, dtype, root, comm, stream));
                         })
      ->wait();
}

torch::Tensor NcclProcessGroup::all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                                           const std::vector<int64_t>& recv_counts) {
  const int64_t seq = begin();
  const auto n = static_cast<std::size_t>(world_size_);
  std::string problem = tensor_problem(input, /*in_place=*/false);
  if (problem.empty() && input.dim() == 0) problem = "needs a tensor with dims: it splits dim 0";
  if (problem.empty() && (send_counts.size() != n || recv_counts.size() != n)) {
    problem = "needs one send and one receive count per rank (" + std::to_string(n) + "), got " +
              std::to_string(send_counts.size()) + " and " + std::to_string(recv_counts.size());
  }
  for (std::size_t j = 0; problem.empty() && j < n; ++j) {
    if (send_counts[j] < 0 || recv_counts[j] < 0) problem = "counts must not be negative";
  }
  if (problem.empty()) {
    const int64_t rows_sent = std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0});
    if (rows_sent != input.size(0)) {
      problem = "send_counts sum to " + std::to_string(rows_sent) + " rows but the input has " +
                std::to_string(input.size(0));
    }
  }
  if (agree(describe_collective(CollectiveOp::kAllToAll, seq, &input, 0), problem)) {
    // Every rank gets the whole count matrix, so every rank reaches the same verdict.
    std::vector<int64_t> mine(send_counts);
    mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
    std::vector<int64_t> gathered(2 * n * n);
    host_.all_gather(mine.data(), gathered.data(), mine.size() * sizeof(int64_t));
    std::vector<std::vector<int64_t>> counts(n);
    for (std::size_t r = 0; r < n; ++r) {
      counts[r].assign(gathered.begin() + static_cast<std::ptrdiff_t>(2 * n * r),
                       gathered.begin() + static_cast<std::ptrdiff_t>(2 * n * (r + 1)));
    }
    if (auto mismatch = find_count_mismatch(counts)) {
      throw DistError(rank_, name(CollectiveOp::kAllToAll, seq) + ": " + *mismatch +
                                 "; nothing was launched, the group remains usable");
    }
  }

  const torch::Tensor in = input.contiguous();
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes[0] = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  torch::Tensor output = torch::empty(sizes, in.options());
  // Elements per row from the shape, not numel / rows, which is undefined for zero rows.
  int64_t row_numel = 1;
  for (int64_t d = 1; d < in.dim(); ++d) row_numel *= in.size(d);
  const auto row_bytes = static_cast<std::size_t>(row_numel) * in.element_size();
  const auto dtype = static_cast<ncclDataType_t>(*nccl_dtype(in.scalar_type()));
  const auto* send = static_cast<const char*>(in.data_ptr());
  auto* recv = static_cast<char*>(output.data_ptr());

  detail::run_collective(comm_, name(CollectiveOp::kAllToAll, seq), {in, output},
                         [&](ncclComm_t comm, cudaStream_t stream) {
                           // One group: NCCL matches all the sends and receives together, so their order cannot
                           // deadlock.
                           detail::NcclGroup group(rank_);
                           std::size_t send_offset = 0, recv_offset = 0;
                           for (std::size_t j = 0; j < n; ++j) {
                             const auto peer = static_cast<int>(j);
                             const auto send_rows = static_cast<std::size_t>(send_counts[j]);
                             const auto recv_rows = static_cast<std::size_t>(recv_counts[j]);
                             // Zero-row pairs are skipped on both sides alike, since the counts agree across ranks.
                             if (send_rows > 0) {
                               NCCL_LAUNCH_CHECK_ON_RANK(
                                   rank_, ncclSend(send + send_offset, send_rows * static_cast<std::size_t>(row_numel),
                                                   dtype, peer, comm, stream));
                             }
                             if (recv_rows > 0) {
                               NCCL_LAUNCH_CHECK_ON_RANK(
                                   rank_, ncclRecv(recv + recv_offset, recv_rows * static_cast<std::size_t>(row_numel),
                                                   dtype, peer, comm, stream));
                             }
                             send_offset += send_rows * row_bytes;
                             recv_offset += recv_rows * row_bytes;
                           }
                           group.end();
                         })
      ->wait();
  return output;
}

void NcclProcessGroup::barrier() {
  const int64_t seq = begin();
  agree(describe_collective(CollectiveOp::kBarrier, seq, nullptr, 0), "");
  // The operand is the group's own cudaMalloc'd float, not a tensor: a barrier needs no LibTorch
  // allocation and works the same with a CPU LibTorch.
  float* buffer = comm_->barrier_buffer;
  auto work =
      detail::run_collective(comm_, name(CollectiveOp::kBarrier, seq), {}, [&](ncclComm_t comm, cudaStream_t stream) {
        NCCL_LAUNCH_CHECK_ON_RANK(rank_, ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream));
      });
  work->wait_host(options_.timeout);
}

}  // namespace moco::dist
