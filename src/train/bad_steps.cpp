#include "train/bad_steps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace moco::train {

void BadSteps::skipped(int64_t step, const std::vector<int>& by_ranks) {
  ++total_;
  if (++in_a_row_ > max_in_a_row_)
    throw std::runtime_error(
        fmt::format("step {}: the queries of rank(s) {} hold NaN or Inf, {} step(s) in a row (train.max_bad_steps {}); "
                    "no checkpoint holds a step after it; checkpoints, if any, are in {}",
                    step, fmt::join(by_ranks, ", "), in_a_row_, max_in_a_row_, checkpoint_root_));
  spdlog::warn(
      "step {}: the queries of rank(s) {} hold NaN or Inf: every rank skips the step ({} in a row, "
      "train.max_bad_steps {})",
      step, fmt::join(by_ranks, ", "), in_a_row_, max_in_a_row_);
}

}  // namespace moco::train
