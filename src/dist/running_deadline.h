#pragma once
// A collective's timeout that counts only the time this process was running. A rank that was
// itself frozen (SIGSTOP, a suspended VM, a debugger) and resumes must not time out at once and
// blame peers it could not hear while frozen: Open MPI resumes stopped ranks (SIGCONT) when another
// rank aborts, and such a rank would then answer the roll call that is meant to find it.
#include <chrono>

namespace moco::dist {

class RunningDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RunningDeadline(Clock::duration budget)
      : last_check_(Clock::now()), thawed_at_(last_check_), end_(last_check_ + budget) {}

  // Call from a polling loop (polls far more often than kFrozen): a gap longer than kFrozen since
  // the last call is time this process did not run, and moves the end by as much.
  bool passed() {
    const auto now = Clock::now();
    if (now - last_check_ > kFrozen) {
      end_ += now - last_check_;
      thawed_at_ = now;
    }
    last_check_ = now;
    return now >= end_;
  }

  // Whether this wait has run for `span` without a freeze, as of the last passed().
  bool ran_for(Clock::duration span) const { return last_check_ - thawed_at_ >= span; }

 private:
  static constexpr Clock::duration kFrozen = std::chrono::milliseconds(250);
  Clock::time_point last_check_;
  Clock::time_point thawed_at_;  // the wait's start, or the end of its last freeze
  Clock::time_point end_;
};

}  // namespace moco::dist
