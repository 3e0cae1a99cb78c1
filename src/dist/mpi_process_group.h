// defines: MpiProcessGroup (the ProcessGroup of CPU tensors over MPI), MpiOptions
#pragma once

#include <chrono>
#include <memory>

#include "dist/process_group.h"

namespace moco::dist {

struct MpiComm;  // an MPI_Comm; see dist/mpi_comm.h

struct MpiOptions {
  // Before each collective the ranks all-gather a 128-byte descriptor of it (sequence number, op,
  // dtype, shape, root) and every rank throws DistError naming the ranks that disagree, instead of
  // hanging or exchanging garbage. The price is one extra small, latency-bound collective per call
  // (for all_to_all a second one, of the count matrix), and a rendezvous: all_reduce_async returns
  // once every rank has reached the same call, only the data transfer then overlaps local work.
  bool check_collectives = true;
  // Bound on every wait: the argument check, the collective itself, the barrier. On expiry the
  // waiting rank throws DistError and the group becomes unusable.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

// Collectives over a private duplicate of a communicator (MPI_COMM_WORLD by default), for
// contiguous or not CPU tensors of float32/64, int64/32/16, int8, uint8 (bool: all but all_reduce).
// MPI must be initialised (init_world) and outlive the group. Each rank constructs its groups in the
// same order: construction is itself collective.
//
// Errors: every failure is a DistError naming the rank. A mismatch or invalid arguments found by the
// argument check leave the group usable on every rank (no data collective was started). A timeout or
// an MPI error leaves the group unusable (its pending collective can neither finish nor be cancelled):
// later calls throw, and the caller is expected to end the job with abort_world().
//
// Threads: one collective at a time per process; wait() may run on another thread than the call
// that started the work. All MPI calls of all groups are serialised by one process-wide mutex
// (MPI_THREAD_SERIALIZED).
class MpiProcessGroup final : public ProcessGroup {
 public:
  explicit MpiProcessGroup(MpiOptions options = {});
  MpiProcessGroup(const MpiComm& comm, MpiOptions options);
  ~MpiProcessGroup() override;
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override;
  int world_size() const override;

  // kAvg sums, then divides on wait(); it is refused for integer dtypes, whose average would truncate.
  std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<Work> all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& recv_counts) override;
  void barrier() override;
  // libnbc's schedules advance only inside MPI calls (MPI_Test among them).
  bool progresses_only_inside_calls() const override { return true; }

  struct State;

 private:
  std::shared_ptr<Work> start_all_reduce(torch::Tensor& tensor, ReduceOp op, bool agree_first);
  std::shared_ptr<State> state_;
};

}  // namespace moco::dist
