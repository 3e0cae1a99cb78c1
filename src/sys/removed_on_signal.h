// defines: RemovedOnSignal (a temporary file that SIGINT, SIGTERM or SIGHUP remove before the process
// ends: an interrupted export leaves nothing behind)
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace moco::sys {

// While it lives, SIGINT, SIGTERM and SIGHUP first remove `path` (unlink, async-signal-safe), then
// end the process as the signal would have (its default action, re-raised). For a single-threaded
// tool writing one temporary file at a time; the handlers it replaced come back when it goes. A
// signal ignored when it comes stays ignored.
// (SIGKILL cannot be caught: a later run removes what a killed one left, see remove_stale_temporaries.)
class RemovedOnSignal {
 public:
  explicit RemovedOnSignal(const std::string& path);
  ~RemovedOnSignal();
  RemovedOnSignal(const RemovedOnSignal&) = delete;
  RemovedOnSignal& operator=(const RemovedOnSignal&) = delete;

 private:
  struct sigaction before_[3];
};

// Removes the files "<target>.tmp-<pid>" beside `target` whose process no longer runs (killed, or the
// machine went down); returns them, for the caller to say so.
std::vector<std::string> remove_stale_temporaries(const std::string& target);

}  // namespace moco::sys
