// defines: ProgressThread (advances non-blocking collectives while their caller computes)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/process_group.h"

namespace moco::dist {

// Calls Work::progress() on the collectives it is given, one pass every `interval`, on a thread of
// its own, until pause(). For backends whose non-blocking collectives move bytes only inside their
// calls (Open MPI's): without it a gradient all-reduce launched early in backward sits idle until
// backward ends. A work whose progress() throws is dropped; its wait() reports the error.
class ProgressThread {
 public:
  explicit ProgressThread(std::chrono::microseconds interval);
  ~ProgressThread();  // stops and joins
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void add(std::shared_ptr<Work> work);
  // Forgets every work; returns once the thread no longer touches any of them, so that the caller
  // may wait() on them alone.
  void pause();
  // Passes made over a non-empty set of works since construction (tests, diagnostics).
  int64_t passes() const;

 private:
  void run();

  const std::chrono::microseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<Work>> works_;
  bool busy_ = false;  // a pass is calling progress() outside the lock
  bool quit_ = false;
  int64_t passes_ = 0;
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace moco::dist
