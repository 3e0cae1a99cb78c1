#include "train/bad_steps.h"

#include "model/nonfinite.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <string>

namespace moco::train {

namespace {

// "rank 1: queries, loss, gradients; rank 3: keys, loss"
std::string who_and_what(const std::vector<int>& by_ranks, const std::vector<int32_t>& causes) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < by_ranks.size(); ++i)
    parts.push_back(fmt::format("rank {}: {}", by_ranks[i],
                                i < causes.size() ? model::nonfinite_causes_text(causes[i]) : std::string("?")));
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

void BadSteps::skipped(int64_t step, const std::vector<int>& by_ranks, const std::vector<int32_t>& causes) {
  ++total_;
  const auto who = who_and_what(by_ranks, causes);
  if (++in_a_row_ > max_in_a_row_)
    throw std::runtime_error(
        fmt::format("step {}: NaN or Inf ({}), {} step(s) in a row (train.max_bad_steps {}); "
                    "no checkpoint holds a step after it; checkpoints, if any, are in {}",
                    step, who, in_a_row_, max_in_a_row_, checkpoint_root_));
  spdlog::warn("step {}: NaN or Inf ({}): every rank skips the step ({} in a row, train.max_bad_steps {})", step, who,
               in_a_row_, max_in_a_row_);
}

}  // namespace moco::train
