// defines: BatchShuffle (shuffle-BN's permutation of the global key batch across ranks, done with
// one all-to-all each way)
#pragma once

#include "dist/process_group.h"

#include <vector>

namespace moco::moco_v2 {

// The global batch is the ranks' batches of b rows each, concatenated in rank order. A shuffle by a
// global permutation `perm` (the same on every rank) gives rank r the rows perm[r*b .. r*b+b) of the
// global batch, in that order; unshuffle brings the results back to the ranks and rows they came
// from. The reference implementation all-gathers the whole global batch on every rank to do this;
// here each rank sends only the rows another rank needs, so a step moves about 2*b rows per rank
// instead of 2*W*b.
class BatchShuffle {
 public:
  BatchShuffle(const std::vector<int64_t>& perm, int rank, int world_size);

  torch::Tensor shuffle(const torch::Tensor& local, dist::ProcessGroup& group) const;
  torch::Tensor unshuffle(const torch::Tensor& shuffled, dist::ProcessGroup& group) const;

  // Rows this rank sends to other ranks (not to itself) in one shuffle (unshuffle sends as many).
  int64_t rows_sent_to_others() const;
  // The global index of the sample at row i of this rank's shuffled batch: perm[rank*b + i].
  const std::vector<int64_t>& shuffled_globals() const { return shuffled_globals_; }

 private:
  int rank_;
  int64_t rows_;  // b
  // Shuffle: local rows to send, grouped by destination rank, and how many go to each.
  std::vector<int64_t> send_rows_, send_counts_;
  // Shuffle: where each received row (grouped by source rank) lands in the shuffled batch.
  std::vector<int64_t> recv_slots_, recv_counts_;
  std::vector<int64_t> shuffled_globals_;
};

// A permutation of [0, n) that depends only on (seed, step): every rank draws the same one.
std::vector<int64_t> shared_permutation(int64_t n, uint64_t seed, int64_t step);

}  // namespace moco::moco_v2
