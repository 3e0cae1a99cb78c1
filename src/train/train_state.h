// defines: Progress (where the loop stands), TrainState (everything a checkpoint must hold to continue a
// run bit for bit, as named tensors: the method's and the job's entries, the run's progress as named
// counters and values, and for a job that draws from it LibTorch's CPU generator)
#pragma once

#include "ckpt/checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moco::train {

// The loop's own progress; a job keeps its own counters and values beside it (TrainState).
struct Progress {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // the loader's position: the epoch and the global batch within it
  int64_t batch_in_epoch = 0;  // that comes next
  double train_seconds = 0;    // training time so far (a time-budget run's lr follows it)
};

// The entries given, then progress/<name> for each counter (int64 [1]) and value (float64 [1]) of
// the layout, then rng/torch_cpu (rank-local) when the layout keeps the generator. The counters
// step, epoch and batch_in_epoch and the value train_seconds must be in every layout (the loop's).
// MoCo pre-training's layout: progress/{step,epoch,batch_in_epoch,shuffle_steps,train_seconds,
// knn_random_init} and rng/torch_cpu; the linear protocol's: progress/{epoch,batch_in_epoch,step,
// best_epoch,train_seconds,best_top1,best_top5,epoch_loss_sum}.
class TrainState {
 public:
  struct Layout {
    std::vector<std::string> counters, values;
    bool generator = false;
  };
  TrainState(std::vector<ckpt::StateEntry> entries, const Layout& layout);

  int64_t& counter(const std::string& name);  // throws std::logic_error for a name not in the layout
  double& value(const std::string& name);
  const std::vector<ckpt::StateEntry>& entries() const { return entries_; }
  // The loop's progress into its counters and values, the generator's state copied in: what a save writes.
  const std::vector<ckpt::StateEntry>& entries_for_save(const Progress& progress);
  // After a load into entries(): the loop's progress; the generator restored.
  Progress restored_progress();

 private:
  std::vector<std::string> counter_names_, value_names_;
  torch::Tensor counters_;  // int64 [counters]
  torch::Tensor values_;    // float64 [values]
  torch::Tensor rng_;       // undefined without the generator
  std::vector<ckpt::StateEntry> entries_;
};

}  // namespace moco::train
