// defines: BadSteps (the count of steps skipped because a rank's queries, keys, loss or gradients held
// NaN or Inf; the warning for each, and the error once more than train.max_bad_steps come in a row)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moco::train {

class BadSteps {
 public:
  // checkpoint_root: named in the error, where the run's checkpoints are.
  BadSteps(int64_t max_in_a_row, std::string checkpoint_root)
      : max_in_a_row_(max_in_a_row), checkpoint_root_(std::move(checkpoint_root)) {}
  // Step `step` (counted from 1) was skipped because of these ranks, with these model::NonfiniteCause
  // bits (one per rank): warns, or throws std::runtime_error when that makes more than max_in_a_row in a row.
  void skipped(int64_t step, const std::vector<int>& by_ranks, const std::vector<int32_t>& causes);
  void trained() { in_a_row_ = 0; }
  int64_t total() const { return total_; }

 private:
  int64_t max_in_a_row_;
  std::string checkpoint_root_;
  int64_t total_ = 0, in_a_row_ = 0;
};

}  // namespace moco::train
