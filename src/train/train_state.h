// defines: Progress (where a run stands), TrainState (everything a checkpoint must hold to continue a
// run bit for bit, as the named tensors the checkpoint layer saves and restores)
#pragma once

#include "ckpt/checkpoint.h"
#include "model/moco.h"
#include "train/sgd.h"

#include <cmath>
#include <vector>

namespace moco::train {

struct Progress {
  int64_t step = 0;                       // optimizer steps done
  int64_t epoch = 0;                      // the loader's position: the epoch and the global batch within it
  int64_t batch_in_epoch = 0;             // that comes next
  int64_t shuffle_steps = 0;              // the MoCo shuffle-permutation counter
  double train_seconds = 0;               // training time so far (a time-budget run's lr follows it)
  double knn_random_init = std::nan("");  // kNN top-1 of the encoder before training
};

// Names follow torchvision's state_dict keys under one group per module:
//   encoder_q/<key>, encoder_k/<key>                  parameters and BatchNorm buffers
//   moco/queue, moco/queue_ptr                        the queue of keys and its write position
//   optimizer/momentum_buffer/<key>                   SGD momentum of each query-encoder parameter
//   progress/{step,epoch,batch_in_epoch,shuffle_steps,train_seconds,knn_random_init}
//   rng/torch_cpu                                     LibTorch's CPU generator (rank-local)
// BatchNorm buffers are replicated when every step broadcasts rank 0's (the caller broadcasts them
// before saving), rank-local otherwise.
class TrainState {
 public:
  TrainState(model::MocoImpl& moco, MomentumSgd& sgd, bool bn_buffers_rank_local);
  // The entries, with the progress tensors and the generator state filled in from `progress`.
  const std::vector<ckpt::StateEntry>& entries_for_save(const Progress& progress);
  const std::vector<ckpt::StateEntry>& entries() const { return entries_; }
  // After a load into entries(): the restored progress; also restores the MoCo counter and the
  // generator.
  Progress restored_progress();

 private:
  model::MocoImpl& moco_;
  torch::Tensor counters_;  // int64 [4]: step, epoch, batch_in_epoch, shuffle_steps
  torch::Tensor seconds_;   // float64 [2]: train_seconds, knn_random_init
  torch::Tensor rng_;
  std::vector<ckpt::StateEntry> entries_;
};

}  // namespace moco::train
