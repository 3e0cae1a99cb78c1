// defines: Progress (where a run stands), TrainState (everything a checkpoint must hold to continue a
// run bit for bit, as the named tensors the checkpoint layer saves and restores)
#pragma once

#include "ckpt/checkpoint.h"

#include <cmath>
#include <vector>

namespace moco::train {

struct Progress {
  int64_t step = 0;                       // optimizer steps done
  int64_t epoch = 0;                      // the loader's position: the epoch and the global batch within it
  int64_t batch_in_epoch = 0;             // that comes next
  int64_t shuffle_steps = 0;              // the method's draw counter (MoCo: shuffle permutations)
  double train_seconds = 0;               // training time so far (a time-budget run's lr follows it)
  double knn_random_init = std::nan("");  // kNN top-1 of the encoder before training
};

// The method's entries (run::Method::state_entries: for MoCo v2 encoder_q/, encoder_k/, moco/ and
// optimizer/), then the run's own:
//   progress/{step,epoch,batch_in_epoch,shuffle_steps,train_seconds,knn_random_init}
//   rng/torch_cpu                                     LibTorch's CPU generator (rank-local)
// shuffle_steps is the method's draw counter (run::Method::draw_counter).
class TrainState {
 public:
  // method_entries: run::Method::state_entries().
  explicit TrainState(std::vector<ckpt::StateEntry> method_entries);
  // The entries, with the progress tensors and the generator state filled in from `progress`.
  const std::vector<ckpt::StateEntry>& entries_for_save(const Progress& progress);
  const std::vector<ckpt::StateEntry>& entries() const { return entries_; }
  // After a load into entries(): the restored progress (the caller gives the method its draw
  // counter); also restores the generator.
  Progress restored_progress();

 private:
  torch::Tensor counters_;  // int64 [4]: step, epoch, batch_in_epoch, shuffle_steps
  torch::Tensor seconds_;   // float64 [2]: train_seconds, knn_random_init
  torch::Tensor rng_;
  std::vector<ckpt::StateEntry> entries_;
};

}  // namespace moco::train
