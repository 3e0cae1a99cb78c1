// defines: ProcessGroup (the collectives the model layer may use), Work (a collective in flight),
// LocalProcessGroup (world size 1)
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

namespace moco::dist {

enum class ReduceOp { kSum, kAvg };

// A collective started but maybe not finished. wait() returns once the result is in place (for
// CUDA tensors: once it is ordered before later work on the current stream) and rethrows the
// collective's error, if any. Once it has returned, a second wait() returns at once.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // Lets the collective advance without waiting for it, where the backend moves bytes only inside
  // its calls (Open MPI's non-blocking collectives progress only while some MPI call runs). A
  // no-op for backends that progress by themselves (NCCL). Throws the collective's error, if any.
  virtual void progress() {}
};

// Collective operations over the ranks of one job. Every rank must call the same collectives in the
// same order with tensors of equal shape and dtype; implementations detect a mismatch and throw on
// every rank rather than hang. Knows tensors, nothing of MoCo.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place on a contiguous tensor.
  virtual std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) = 0;
  void all_reduce(torch::Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }
  // As all_reduce_async, without the per-call agreement on shape, dtype and op that a checking
  // backend makes first (a round trip to every peer that holds the caller until the slowest rank
  // arrives): for a caller that agreed once on a fixed sequence of such calls, as GradientReducer
  // agrees on its bucket layout. The call still counts in the sequence numbers that the next checked
  // collective compares, so a rank that made more or fewer of them is still caught there.
  virtual std::shared_ptr<Work> all_reduce_async_preagreed(torch::Tensor& tensor, ReduceOp op) {
    return all_reduce_async(tensor, op);
  }
  // Concatenation along dim 0 of every rank's tensor, in rank order. Every rank's tensor has the
  // same shape.
  virtual torch::Tensor all_gather(const torch::Tensor& tensor) = 0;
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Rank r sends input rows [sum(send_counts[:j]), +send_counts[j]) to rank j and receives
  // recv_counts[j] rows from rank j; the result stacks the received rows in rank order. Counts are
  // in rows of dim 0; the other dims agree on every rank.
  virtual torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& recv_counts) = 0;
  virtual void barrier() = 0;
  // Whether a non-blocking collective moves bytes only while some call of the backend runs, so that
  // a caller overlapping it with work of its own must call Work::progress() meanwhile (Open MPI).
  virtual bool progresses_only_inside_calls() const { return false; }
};

// The whole world is this process: every collective is the identity.
class LocalProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::shared_ptr<Work> all_reduce_async(torch::Tensor&, ReduceOp) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override { return tensor; }
  void broadcast(torch::Tensor&, int) override {}
  torch::Tensor all_to_all(const torch::Tensor& input, const std::vector<int64_t>&,
                           const std::vector<int64_t>&) override {
    return input;
  }
  void barrier() override {}
};

}  // namespace moco::dist
