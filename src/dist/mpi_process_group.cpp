#include "dist/mpi_process_group.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>

#include "dist/bootstrap.h"
#include "dist/collective_check.h"
#include "dist/errors.h"
#include "dist/mpi_comm.h"
#include "dist/running_deadline.h"

namespace moco::dist {
namespace {

using Clock = std::chrono::steady_clock;

// The tag of the point-to-point descriptor exchange (collectives do not match point-to-point
// messages, and MPI keeps the messages of one pair in order, so one tag serves every collective).
constexpr int kDescriptorTag = 0x6d6f;
constexpr int kRollCallTag = 0x6d70;

// Between polls of a pending operation. Open MPI's nonblocking collectives advance only inside MPI
// calls, so a sleeping waiter stalls its collective as well as itself: poll without sleeping (but
// yielding the core, ranks are oversubscribed in tests) for the first kSpin, which covers the
// collectives of a training step, and only then sleep, up to 1 ms, so that a rank waiting for a
// slow peer leaves the core to it and to the data loader's threads.
class BackOff {
 public:
  void operator()() {
    if (Clock::now() - start_ < kSpin) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 << std::min(sleeps_++, 7))));
  }

 private:
  static constexpr std::chrono::milliseconds kSpin{20};
  Clock::time_point start_ = Clock::now();
  int sleeps_ = 0;
};

// MPI_THREAD_SERIALIZED: one MPI call at a time in the whole process, whichever group makes it.
std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

// A nonblocking MPI operation and the memory it reads or writes until it completes. Kept alive by
// the group as well as by its Work, so that a Work dropped unwaited, or an operation abandoned after
// a timeout (a collective can be neither cancelled nor freed), never leaves MPI writing into freed
// memory. Outside the anonymous namespace because State, declared in the header, holds it.
}  // namespace
namespace detail {
struct MpiPending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<MPI_Request> exchange;  // the descriptor exchange: a receive from each peer, then the sends
  std::vector<int> exchange_peers;    // the peer of each receive in `exchange`
  bool done = false;
  std::vector<torch::Tensor> tensors;
  std::vector<int64_t> send_words, recv_words;
};
}  // namespace detail
namespace {
using Pending = detail::MpiPending;

std::string seconds_text(std::chrono::milliseconds timeout) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return text;
}

MPI_Datatype mpi_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return MPI_FLOAT;
    case torch::kFloat64:
      return MPI_DOUBLE;
    case torch::kInt64:
      return MPI_INT64_T;
    case torch::kInt32:
      return MPI_INT32_T;
    case torch::kInt16:
      return MPI_INT16_T;
    case torch::kInt8:
      return MPI_INT8_T;
    case torch::kUInt8:
      return MPI_UINT8_T;
    case torch::kBool:
      return MPI_C_BOOL;
    default:
      return MPI_DATATYPE_NULL;
  }
}

// "" when `tensor` can travel through MPI, else why not.
std::string tensor_problem(const torch::Tensor& tensor) {
  if (!tensor.defined()) return "the tensor is undefined";
  if (!tensor.device().is_cpu())
    return "the MPI backend takes CPU tensors, got one on " + tensor.device().str() + " (use the NCCL backend)";
  if (mpi_type(tensor.scalar_type()) == MPI_DATATYPE_NULL)
    return "dtype " + dtype_name(tensor.scalar_type()) + " has no MPI datatype here";
  if (tensor.numel() > INT_MAX)
    return std::to_string(tensor.numel()) + " elements exceed MPI's int counts; split the tensor";
  return "";
}

// The caller's tensor if MPI can use its memory directly, else a contiguous copy.
torch::Tensor contiguous_buffer(const torch::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : tensor.contiguous();
}

}  // namespace

struct MpiProcessGroup::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  MpiOptions options;
  int64_t seq = 0;     // collectives started on this group, the same count on every rank
  std::string broken;  // why the group is unusable; empty while it is fine
  std::vector<std::shared_ptr<Pending>> in_flight;
  std::vector<char> heard_at_roll_call, answered_roll_call;  // by peer

  // One MPI_Test of `pending` (which also advances every other operation in flight): whether it
  // has completed. Throws if MPI reports its failure.
  bool test(Pending& pending, CollectiveOp op, int64_t number) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (pending.done) return true;
    int flag = 0;
    const int rc = MPI_Test(&pending.request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      const std::string what = std::string(collective_name(op)) + " #" + std::to_string(number);
      broken = what + " failed";
      pending.done = true;  // MPI has finished with the request, if not in the way we wanted
      detail::throw_mpi_failed(rc, ("MPI_Test(" + what + ")").c_str(), __FILE__, __LINE__);
    }
    if (flag) pending.done = true;
    return pending.done;
  }

  // Polls until `pending` completes or the deadline passes (back_off between polls).
  void wait_for(Pending& pending, CollectiveOp op, int64_t number, const char* phase) {
    RunningDeadline deadline(options.timeout);
    BackOff back_off;
    for (;;) {
      if (test(pending, op, number)) return;
      if (deadline.passed()) {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        const std::string what = std::string(collective_name(op)) + " #" + std::to_string(number);
        broken = what + " timed out";
        throw DistError(rank, what + " did not complete within " + seconds_text(options.timeout) + phase + "; " +
                                  roll_call_verdict());
      }
      answer_roll_calls_if_waited(deadline);
      back_off();
    }
  }

  std::chrono::milliseconds roll_call_window() const {
    return std::min<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(3));
  }

  // A rank that timed out holds a roll call; the ranks still waiting in a collective answer it at
  // once rather than when their own timeouts pass, which may be later than the roll call lasts
  // (they entered the collective later, or time they did not run does not count), and would name
  // them with the stuck rank. A rank answers only once its wait has run a roll call's length without
  // a freeze, so that a stuck rank resumed (Open MPI resumes stopped ranks when another aborts)
  // cannot answer the roll call that is meant to find it.
  void answer_roll_calls_if_waited(const RunningDeadline& deadline) {
    if (comm == MPI_COMM_NULL || !deadline.ran_for(roll_call_window())) return;  // NULL: the group is being made
    std::lock_guard<std::mutex> lock(mpi_mutex());
    for (;;) {
      int waiting = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm, &waiting, &status) != MPI_SUCCESS || !waiting) return;
      const int peer = status.MPI_SOURCE;
      int64_t message = 0;
      MPI_Recv(&message, 1, MPI_INT64_T, peer, kRollCallTag, comm, MPI_STATUS_IGNORE);
      heard_at_roll_call[static_cast<size_t>(peer)] = 1;
      send_presence(peer);
    }
  }

  // Once to each peer: a roll call receives one message from each.
  void send_presence(int peer) {
    if (answered_roll_call[static_cast<size_t>(peer)]) return;
    answered_roll_call[static_cast<size_t>(peer)] = 1;
    static const int64_t present = 1;
    MPI_Request request = MPI_REQUEST_NULL;  // a send to a dead peer may never complete: not waited for
    MPI_Isend(&present, 1, MPI_INT64_T, peer, kRollCallTag, comm, &request);
    MPI_Request_free(&request);
  }

  // After a collective timed out on this rank: it tells every other rank it is here, and the ranks
  // not heard from within a few seconds (by their own roll calls or by answering this one) are the
  // dead or stuck ones. Called once (the group is broken afterwards) with the MPI mutex held.
  std::vector<int> roll_call() {
    auto* messages = new std::vector<int64_t>(static_cast<size_t>(size), -1);  // leaked with the requests
    auto* requests = new std::vector<MPI_Request>();
    std::vector<int> awaited;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank || heard_at_roll_call[static_cast<size_t>(peer)]) continue;
      awaited.push_back(peer);
      requests->emplace_back(MPI_REQUEST_NULL);
      MPI_Irecv(&(*messages)[static_cast<size_t>(peer)], 1, MPI_INT64_T, peer, kRollCallTag, comm, &requests->back());
    }
    for (int peer = 0; peer < size; ++peer)
      if (peer != rank) send_presence(peer);
    const auto deadline = Clock::now() + roll_call_window();
    while (Clock::now() < deadline) {
      int all = 0;
      MPI_Testall(static_cast<int>(requests->size()), requests->data(), &all, MPI_STATUSES_IGNORE);
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::vector<int> silent;
    for (size_t i = 0; i < awaited.size(); ++i) {
      int arrived = 0;
      if ((*requests)[i] != MPI_REQUEST_NULL) MPI_Test(&(*requests)[i], &arrived, MPI_STATUS_IGNORE);
      if ((*messages)[static_cast<size_t>(awaited[i])] < 0) silent.push_back(awaited[i]);
    }
    return silent;
  }

  // Who is dead or stuck, by roll call: ranks waiting on a dead rank elsewhere still answer it.
  std::string roll_call_verdict() {
    if (comm == MPI_COMM_NULL) return "no roll call: the group's communicator was never made";
    const auto silent = roll_call();
    if (silent.empty()) return "every rank answered a roll call: none is dead or stuck, some called another collective";
    return rank_list(silent) + " did not answer a roll call (dead or stuck)" + hosts_of(silent);
  }

  // ", on host H" (or ", on hosts H1, H2") for ranks of this group, from the world's host names; ""
  // when they are all on this rank's own host (one host: the messages stay as they were).
  std::string hosts_of(const std::vector<int>& ranks) const {
    const auto& hosts = world_hosts();
    if (hosts.empty() || ranks.empty()) return "";
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    std::vector<int> in_world(ranks.size(), MPI_UNDEFINED);
    if (MPI_Comm_group(comm, &mine) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS)
      MPI_Group_translate_ranks(mine, static_cast<int>(ranks.size()), ranks.data(), world, in_world.data());
    if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
    if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
    std::vector<std::string> named;
    for (const int r : in_world)
      if (r >= 0 && r < static_cast<int>(hosts.size()) &&
          std::find(named.begin(), named.end(), hosts[static_cast<size_t>(r)]) == named.end())
        named.push_back(hosts[static_cast<size_t>(r)]);
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (named.empty() ||
        (named.size() == 1 && me < static_cast<int>(hosts.size()) && named[0] == hosts[static_cast<size_t>(me)]))
      return "";
    std::string text;
    for (const auto& h : named) text += (text.empty() ? "" : ", ") + h;
    return (named.size() == 1 ? ", on host " : ", on hosts ") + text;
  }

  // The descriptor exchange's wait: as wait_for, but on a timeout it names the ranks whose
  // descriptor never came, i.e. the ranks that never reached this collective.
  void wait_for_exchange(Pending& pending, CollectiveOp op, int64_t number) {
    RunningDeadline deadline(options.timeout);
    const std::string what = std::string(collective_name(op)) + " #" + std::to_string(number);
    BackOff back_off;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        int flag = 0;
        const int rc =
            MPI_Testall(static_cast<int>(pending.exchange.size()), pending.exchange.data(), &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
          broken = what + " failed";
          detail::throw_mpi_failed(rc, ("MPI_Testall(" + what + ")").c_str(), __FILE__, __LINE__);
        }
        if (flag) {
          pending.done = true;
          return;
        }
      }
      if (deadline.passed()) {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        std::vector<int> missing;
        for (size_t i = 0; i < pending.exchange_peers.size(); ++i) {
          int arrived = 0;
          if (pending.exchange[i] != MPI_REQUEST_NULL) MPI_Test(&pending.exchange[i], &arrived, MPI_STATUS_IGNORE);
          if (pending.exchange[i] != MPI_REQUEST_NULL && !arrived) missing.push_back(pending.exchange_peers[i]);
        }
        broken = what + " timed out";
        throw DistError(rank, what + " did not complete within " + seconds_text(options.timeout) + ", waiting for " +
                                  (missing.empty() ? std::string("a rank") : rank_list(missing)) +
                                  ", which never reached it; " + roll_call_verdict());
      }
      answer_roll_calls_if_waited(deadline);
      back_off();
    }
  }

  // Registers `pending` so that its memory outlives any Work, and forgets finished ones.
  void track(const std::shared_ptr<Pending>& pending) {
    std::vector<std::shared_ptr<Pending>> live;
    for (auto& p : in_flight)
      if (!p->done) live.push_back(std::move(p));
    live.push_back(pending);
    in_flight = std::move(live);
  }

  int64_t begin(CollectiveOp op) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (!broken.empty())
      throw DistError(rank, std::string(collective_name(op)) + ": process group unusable since " + broken +
                                "; end the job (abort_world)");
    return ++seq;
  }

  // Every rank learns what every other rank is about to do; all throw the same verdict if they
  // disagree. Only then is the data collective started, so a throw here leaves the group usable.
  void agree(CollectiveDescriptor descriptor, const std::string& problem, bool exchange = true) {
    const auto op = static_cast<CollectiveOp>(descriptor.op);
    const std::string what = std::string(collective_name(op)) + " #" + std::to_string(descriptor.seq);
    if (!options.check_collectives || !exchange) {
      if (!problem.empty()) throw DistError(rank, what + ": " + problem);
      return;
    }
    descriptor.invalid_arguments = problem.empty() ? 0 : 1;
    auto pending = std::make_shared<Pending>();
    pending->send_words.resize(kDescriptorWords);
    std::memcpy(pending->send_words.data(), &descriptor, sizeof descriptor);
    pending->recv_words.resize(static_cast<size_t>(kDescriptorWords) * size);
    // Point to point rather than one all-gather, so that a timeout knows whose descriptor is missing.
    std::memcpy(pending->recv_words.data() + static_cast<size_t>(rank) * kDescriptorWords, &descriptor,
                sizeof descriptor);
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      pending->exchange.reserve(2 * static_cast<size_t>(size));
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        pending->exchange.emplace_back(MPI_REQUEST_NULL);
        pending->exchange_peers.push_back(peer);
        MPI_CHECK(MPI_Irecv(pending->recv_words.data() + static_cast<size_t>(peer) * kDescriptorWords, kDescriptorWords,
                            MPI_INT64_T, peer, kDescriptorTag, comm, &pending->exchange.back()));
      }
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        pending->exchange.emplace_back(MPI_REQUEST_NULL);
        MPI_CHECK(MPI_Isend(pending->send_words.data(), kDescriptorWords, MPI_INT64_T, peer, kDescriptorTag, comm,
                            &pending->exchange.back()));
      }
      track(pending);
    }
    wait_for_exchange(*pending, op, descriptor.seq);

    std::vector<CollectiveDescriptor> all(static_cast<size_t>(size));
    static_assert(std::is_trivially_copyable_v<CollectiveDescriptor>, "copied as words");
    std::memcpy(static_cast<void*>(all.data()), pending->recv_words.data(), sizeof(CollectiveDescriptor) * all.size());
    const std::string usable = "; no data was exchanged, the group remains usable";
    if (!problem.empty()) throw DistError(rank, what + ": " + problem + " (every rank throws)" + usable);
    const std::vector<int> invalid = ranks_with_invalid_arguments(all);
    if (!invalid.empty())
      throw DistError(rank, what + ": " + rank_list(invalid) + " rejected " + (invalid.size() == 1 ? "its" : "their") +
                                " arguments (see " + (invalid.size() == 1 ? "its" : "their") + " error)" + usable);
    if (auto disagreement = find_disagreement(all)) throw DistError(rank, *disagreement + usable);
  }

  // Starts `start` (an MPI_I* call filling pending.request) on the buffers of `pending`.
  std::shared_ptr<Pending> launch(std::shared_ptr<Pending> pending, const std::function<int(MPI_Request*)>& start,
                                  const char* call) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    const int rc = start(&pending->request);
    if (rc != MPI_SUCCESS) {
      broken = std::string(call) + " failed";
      detail::throw_mpi_failed(rc, call, __FILE__, __LINE__);
    }
    track(pending);
    return pending;
  }
};

namespace {

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiProcessGroup::State> state, std::shared_ptr<Pending> pending, int64_t seq,
          std::function<void()> finish)
      : state_(std::move(state)), pending_(std::move(pending)), seq_(seq), finish_(std::move(finish)) {}

  void progress() override {
    if (error_) std::rethrow_exception(error_);
    if (finished_) return;
    try {
      state_->test(*pending_, CollectiveOp::kAllReduce, seq_);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

  void wait() override {
    if (error_) std::rethrow_exception(error_);
    if (finished_) return;
    try {
      state_->wait_for(*pending_, CollectiveOp::kAllReduce, seq_, "");
      finish_();
      finished_ = true;
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

 private:
  std::shared_ptr<MpiProcessGroup::State> state_;
  std::shared_ptr<Pending> pending_;
  int64_t seq_;
  std::function<void()> finish_;  // what remains after MPI is done: the average, the copy back
  bool finished_ = false;
  std::exception_ptr error_;
};

std::shared_ptr<MpiProcessGroup::State> make_state(MPI_Comm parent, MpiOptions options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) throw DistError(-1, "MpiProcessGroup needs MPI running: call init_world() first");
  auto state = std::make_shared<MpiProcessGroup::State>();
  state->options = options;
  MPI_CHECK(MPI_Comm_rank(parent, &state->rank));
  MPI_CHECK(MPI_Comm_size(parent, &state->size));
  state->heard_at_roll_call.assign(static_cast<size_t>(state->size), 0);
  state->answered_roll_call.assign(static_cast<size_t>(state->size), 0);
  // A private communicator: our collectives cannot match anyone else's. MPI_Comm_idup rather than
  // MPI_Comm_dup so that a rank that never constructs its group is a timeout, not a hang. The handle
  // is made outside the state: Open MPI writes it before the duplication completes, and a timeout's
  // roll call must not run on a communicator still being made (it crashed there).
  Pending pending;
  auto* made = new MPI_Comm(MPI_COMM_NULL);
  MPI_CHECK(MPI_Comm_idup(parent, made, &pending.request));
  // On a timeout the duplication may still complete into `made`, which is then left to it.
  state->wait_for(pending, CollectiveOp::kBarrier, 0, " (creating the process group)");
  state->comm = *made;
  delete made;
  MPI_CHECK(MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN));
  return state;
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MpiOptions options) : state_(make_state(MPI_COMM_WORLD, options)) {}

MpiProcessGroup::MpiProcessGroup(const MpiComm& comm, MpiOptions options) : state_(make_state(comm.comm, options)) {}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (state_->broken.empty()) {
    // Finish what is in flight: freeing the communicator under a running collective is erroneous.
    try {
      for (const auto& pending : std::vector<std::shared_ptr<Pending>>(state_->in_flight))
        state_->wait_for(*pending, CollectiveOp::kBarrier, state_->seq, " (destroying the process group)");
    } catch (const DistError& e) {
      spdlog::warn("{}", e.what());
    }
  }
  if (!state_->broken.empty()) {
    // Some operation will never complete: its request, its buffers and the communicator must stay
    // valid until the process ends, so the state is deliberately leaked.
    new std::shared_ptr<State>(state_);
    return;
  }
  std::lock_guard<std::mutex> lock(mpi_mutex());
  MPI_Comm_free(&state_->comm);
}

int MpiProcessGroup::rank() const { return state_->rank; }
int MpiProcessGroup::world_size() const { return state_->size; }

std::shared_ptr<Work> MpiProcessGroup::all_reduce_async(torch::Tensor& tensor, ReduceOp op) {
  return start_all_reduce(tensor, op, /*agree_first=*/true);
}

std::shared_ptr<Work> MpiProcessGroup::all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) {
  return start_all_reduce(tensor, op, /*agree_first=*/false);
}

std::shared_ptr<Work> MpiProcessGroup::start_all_reduce(torch::Tensor& tensor, ReduceOp op, bool agree_first) {
  State& s = *state_;
  const int64_t seq = s.begin(CollectiveOp::kAllReduce);
  std::string problem = tensor_problem(tensor);
  if (problem.empty() && tensor.scalar_type() == torch::kBool) problem = "all_reduce of bool tensors is not supported";
  if (problem.empty() && op == ReduceOp::kAvg && !tensor.is_floating_point())
    problem = "kAvg of " + dtype_name(tensor.scalar_type()) + " would truncate; reduce with kSum and divide yourself";
  s.agree(describe_collective(CollectiveOp::kAllReduce, seq, &tensor, static_cast<int64_t>(op)), problem, agree_first);

  torch::Tensor buffer = contiguous_buffer(tensor);
  auto pending = std::make_shared<Pending>();
  pending->tensors = {buffer};
  const auto count = static_cast<int>(buffer.numel());
  const MPI_Datatype type = mpi_type(buffer.scalar_type());
  const MPI_Comm comm = s.comm;
  s.launch(
      pending,
      [&](MPI_Request* request) {
        return MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count, type, MPI_SUM, comm, request);
      },
      "MPI_Iallreduce");
  const int size = s.size;
  torch::Tensor target = tensor;  // a handle on the caller's storage, for the copy back
  return std::make_shared<MpiWork>(state_, pending, seq, [target, buffer, op, size]() mutable {
    if (op == ReduceOp::kAvg) buffer.div_(size);
    if (!buffer.is_same(target)) target.copy_(buffer);
  });
}

torch::Tensor MpiProcessGroup::all_gather(const torch::Tensor& tensor) {
  State& s = *state_;
  const int64_t seq = s.begin(CollectiveOp::kAllGather);
  std::string problem = tensor_problem(tensor);
  if (problem.empty() && tensor.dim() == 0) problem = "all_gather concatenates along dim 0; got a 0-dim tensor";
  if (problem.empty() && tensor.numel() * s.size > INT_MAX)
    problem = "the gathered result exceeds MPI's int counts; split the tensor";
  s.agree(describe_collective(CollectiveOp::kAllGather, seq, &tensor, 0), problem);

  const torch::Tensor input = contiguous_buffer(tensor);
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] *= s.size;
  torch::Tensor output = torch::empty(shape, input.options());
  auto pending = std::make_shared<Pending>();
  pending->tensors = {input, output};
  const auto count = static_cast<int>(input.numel());
  const MPI_Datatype type = mpi_type(input.scalar_type());
  s.launch(
      pending,
      [&](MPI_Request* request) {
        return MPI_Iallgather(input.data_ptr(), count, type, output.data_ptr(), count, type, s.comm, request);
      },
      "MPI_Iallgather");
  s.wait_for(*pending, CollectiveOp::kAllGather, seq, "");
  return output;
}

void MpiProcessGroup::broadcast(torch::Tensor& tensor, int root) {
  State& s = *state_;
  const int64_t seq = s.begin(CollectiveOp::kBroadcast);
  std::string problem = tensor_problem(tensor);
  if (problem.empty() && (root < 0 || root >= s.size))
    problem = "root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(s.size);
  s.agree(describe_collective(CollectiveOp::kBroadcast, seq, &tensor, root), problem);

  torch::Tensor buffer = contiguous_buffer(tensor);
  auto pending = std::make_shared<Pending>();
  pending->tensors = {buffer};
  const auto count = static_cast<int>(buffer.numel());
  const MPI_Datatype type = mpi_type(buffer.scalar_type());
  s.launch(
      pending, [&](MPI_Request* request) { return MPI_Ibcast(buffer.data_ptr(), count, type, root, s.comm, request); },
      "MPI_Ibcast");
  s.wait_for(*pending, CollectiveOp::kBroadcast, seq, "");
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

torch::Tensor MpiProcessGroup::all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                                          const std::vector<int64_t>& recv_counts) {
  State& s = *state_;
  const int64_t seq = s.begin(CollectiveOp::kAllToAll);
  const auto world = static_cast<size_t>(s.size);
  std::string problem = tensor_problem(input);
  if (problem.empty() && input.dim() == 0) problem = "all_to_all splits along dim 0; got a 0-dim tensor";
  if (problem.empty() && (send_counts.size() != world || recv_counts.size() != world))
    problem = "send_counts and recv_counts need one entry per rank (" + std::to_string(world) + "), got " +
              std::to_string(send_counts.size()) + " and " + std::to_string(recv_counts.size());
  int64_t row_numel = 1;
  int64_t sent_rows = 0, received_rows = 0;
  if (problem.empty()) {
    for (int64_t i = 1; i < input.dim(); ++i) row_numel *= input.size(i);
    for (size_t j = 0; j < world; ++j) {
      if (send_counts[j] < 0 || recv_counts[j] < 0) problem = "counts must not be negative";
      sent_rows += send_counts[j];
      received_rows += recv_counts[j];
    }
  }
  if (problem.empty() && sent_rows != input.size(0))
    problem =
        "send_counts sum to " + std::to_string(sent_rows) + " rows but the input has " + std::to_string(input.size(0));
  if (problem.empty() && std::max(sent_rows, received_rows) * row_numel > INT_MAX)
    problem = "the rows exceed MPI's int counts and displacements; split the tensor";
  s.agree(describe_collective(CollectiveOp::kAllToAll, seq, &input, 0), problem);

  if (s.options.check_collectives) {
    // Every rank gets the whole count matrix, so every rank reaches the same verdict.
    auto pending = std::make_shared<Pending>();
    pending->send_words = send_counts;
    pending->send_words.insert(pending->send_words.end(), recv_counts.begin(), recv_counts.end());
    pending->recv_words.resize(2 * world * world);
    s.launch(
        pending,
        [&](MPI_Request* request) {
          return MPI_Iallgather(pending->send_words.data(), static_cast<int>(2 * world), MPI_INT64_T,
                                pending->recv_words.data(), static_cast<int>(2 * world), MPI_INT64_T, s.comm, request);
        },
        "MPI_Iallgather");
    s.wait_for(*pending, CollectiveOp::kAllToAll, seq, " (exchanging counts)");
    std::vector<std::vector<int64_t>> counts(world);
    for (size_t r = 0; r < world; ++r)
      counts[r].assign(pending->recv_words.begin() + static_cast<std::ptrdiff_t>(2 * world * r),
                       pending->recv_words.begin() + static_cast<std::ptrdiff_t>(2 * world * (r + 1)));
    if (auto mismatch = find_count_mismatch(counts))
      throw DistError(s.rank, "all_to_all #" + std::to_string(seq) + ": " + *mismatch +
                                  "; no data was exchanged, the group remains usable");
  }

  const torch::Tensor send = contiguous_buffer(input);
  std::vector<int64_t> shape = send.sizes().vec();
  shape[0] = received_rows;
  torch::Tensor output = torch::empty(shape, send.options());
  std::vector<int> scounts(world), sdispls(world), rcounts(world), rdispls(world);
  for (size_t j = 0, soff = 0, roff = 0; j < world; ++j) {
    scounts[j] = static_cast<int>(send_counts[j] * row_numel);
    rcounts[j] = static_cast<int>(recv_counts[j] * row_numel);
    sdispls[j] = static_cast<int>(soff);
    rdispls[j] = static_cast<int>(roff);
    soff += static_cast<size_t>(scounts[j]);
    roff += static_cast<size_t>(rcounts[j]);
  }
  auto pending = std::make_shared<Pending>();
  pending->tensors = {send, output};
  const MPI_Datatype type = mpi_type(send.scalar_type());
  s.launch(
      pending,
      [&](MPI_Request* request) {
        return MPI_Ialltoallv(send.data_ptr(), scounts.data(), sdispls.data(), type, output.data_ptr(), rcounts.data(),
                              rdispls.data(), type, s.comm, request);
      },
      "MPI_Ialltoallv");
  s.wait_for(*pending, CollectiveOp::kAllToAll, seq, "");
  return output;
}

void MpiProcessGroup::barrier() {
  State& s = *state_;
  const int64_t seq = s.begin(CollectiveOp::kBarrier);
  s.agree(describe_collective(CollectiveOp::kBarrier, seq, nullptr, 0), "");
  // The argument check completes only once every rank has contributed: it already is the barrier.
  if (s.options.check_collectives) return;
  auto pending = std::make_shared<Pending>();
  s.launch(
      pending, [&](MPI_Request* request) { return MPI_Ibarrier(s.comm, request); }, "MPI_Ibarrier");
  s.wait_for(*pending, CollectiveOp::kBarrier, seq, "");
}

}  // namespace moco::dist
