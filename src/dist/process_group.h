// defines: ProcessGroup (the collectives the model layer may use), LocalProcessGroup (world size 1)
#pragma once

#include <torch/types.h>

#include <memory>

namespace moco::dist {

enum class ReduceOp { kSum, kAvg };

// Collective operations over the ranks of one job. Every rank must call the same collectives in the
// same order with tensors of equal shape and dtype. Knows tensors, nothing of MoCo.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  virtual void all_reduce(torch::Tensor& tensor, ReduceOp op) = 0;
  // Concatenation along dim 0 of every rank's tensor, in rank order.
  virtual torch::Tensor all_gather(const torch::Tensor& tensor) = 0;
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;
};

// The whole world is this process: every collective is the identity.
class LocalProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce(torch::Tensor&, ReduceOp) override {}
  torch::Tensor all_gather(const torch::Tensor& tensor) override { return tensor; }
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}
};

}  // namespace moco::dist
