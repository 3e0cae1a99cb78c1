// defines: TwoViewLoader (worker threads + prefetch, two augmented views per image),
// epoch_order (the per-epoch shuffled order, sliced per rank), batches_per_epoch
#pragma once

#include "data/augment.h"
#include "data/dataset.h"

#include <memory>
#include <optional>

namespace moco::data {

struct LoaderOptions {
  int64_t batch_size = 256;  // per rank
  int workers = 1;           // augmentation threads
  int prefetch = 2;          // ready batches kept ahead of the consumer (batches being built count;
                             // the bound is max(prefetch, workers) so every worker can stay busy)
  bool shuffle = true;
  bool key_view = true;      // false: the query view only (TwoViewBatch::key stays undefined)
  bool pin_memory = false;   // batches in page-locked host memory, for asynchronous copies to a GPU
  bool uint8_views = false;  // views as uint8 pixels, normalised later on the device (run::PixelNormalizer);
                             // recipes v1, v2, v3 (the simple recipe is refused)
  bool drop_last = true;     // false: keep the last partial batch, as main_lincls.py's sampler and loader
  uint64_t seed = 0;
  int rank = 0, world_size = 1;
};

// The indices one rank visits in one epoch. The global order is a seeded permutation of [0, size)
// when shuffle is on, identity otherwise. drop_last: it is cut to a multiple of world*batch.
// Otherwise it is padded with its own first indices to a multiple of world (DistributedSampler's
// drop_last=False), and the last global batch is the partial rest, world x (rest / world). Rank r
// takes its contiguous share of every global batch, so rank-ordered concatenation of the ranks'
// batches equals the global batch a single process with batch world*batch would see. Batch j of a
// rank is its indices [j*batch, (j+1)*batch), the last one possibly shorter.
std::vector<int64_t> epoch_order(int64_t dataset_size, const LoaderOptions& options, int64_t epoch);

// The batches of one rank's epoch: the length of epoch_order in options.batch_size, rounded up
// unless drop_last.
int64_t batches_per_epoch(int64_t dataset_size, const LoaderOptions& options);

struct TwoViewBatch {
  torch::Tensor query;    // float [b, C, S, S] normalised (uint8 pixels with uint8_views)
  torch::Tensor key;      // the same for an independent augmentation of the same images
  torch::Tensor labels;   // int64 [b] (for monitoring only; MoCo never reads them)
  torch::Tensor indices;  // int64 [b] dataset indices
};

class TwoViewLoader {
 public:
  TwoViewLoader(std::shared_ptr<const Dataset> dataset, AugmentOptions augment, LoaderOptions options);
  ~TwoViewLoader();
  TwoViewLoader(const TwoViewLoader&) = delete;
  TwoViewLoader& operator=(const TwoViewLoader&) = delete;

  int64_t batches_per_epoch() const;
  const LoaderOptions& options() const;
  // Starts producing the batches of `epoch` in the background (stops any epoch in flight), from batch
  // `first_batch` on: a resumed run continues mid-epoch. Batch j of an epoch holds the same global
  // samples for any world size with the same global batch.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of the current epoch in order, or nullopt at its end. A worker's exception is
  // rethrown here (and again on later calls, until the next start_epoch). Call start_epoch and
  // next from one thread.
  std::optional<TwoViewBatch> next();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace moco::data
