// defines: Watchdog (the NCCL group's watchdog: a thread that times out and aborts collectives),
// WatchedWork / WatchedComm / WatchdogClock (what it watches, behind interfaces that tests fake),
// RunningClock (steady time less the time the process was frozen), run_if_unlocked (the watchdog's
// only way to the communicator's lock), wait_until_settled (bounds a non-blocking NCCL call),
// note_step / noted_step (the training step, for the watchdog's messages).
// Needs neither CUDA nor NCCL: the CUDA side (events, ncclCommGetAsyncError, ncclCommAbort) is an
// adapter in nccl_process_group.cpp, so the decisions are tested on CPU.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace moco::dist {

// The step the training loop is in (-1 before the first), for messages of threads that cannot ask.
void note_step(int64_t step);
int64_t noted_step();

// Where the watchdog reads the time and how it sleeps between polls.
class WatchdogClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~WatchdogClock() = default;
  virtual time_point now() = 0;
  virtual void sleep_for(std::chrono::microseconds span) = 0;
};

// std::chrono::steady_clock less the gaps between calls longer than kFrozen: as RunningDeadline, a
// process that was stopped (SIGSTOP, a debugger) must not time out at once and blame its peers. The
// watchdog polls far more often than kFrozen, so only a frozen process shows such a gap.
class RunningClock final : public WatchdogClock {
 public:
  static constexpr std::chrono::milliseconds kFrozen{250};
  // `base` is steady_clock::now unless a test gives another.
  explicit RunningClock(std::function<time_point()> base = {});
  time_point now() override;
  void sleep_for(std::chrono::microseconds span) override { std::this_thread::sleep_for(span); }

 private:
  std::function<time_point()> base_;
  std::mutex mutex_;  // the watchdog's thread and the launching thread both read the time
  std::optional<time_point> last_;
  std::chrono::steady_clock::duration frozen_{0};
};

// One launched collective: its completion event, as cudaEventQuery sees it.
class WatchedWork {
 public:
  enum class State { kPending, kDone, kFailed };
  virtual ~WatchedWork() = default;
  virtual State state() = 0;
  // Why, once state() said kFailed.
  virtual std::string failure() { return "the completion event could not be queried"; }
};

// Runs `f` holding `mutex` if the mutex is free now; false, without running `f`, while another
// thread holds it. The watchdog reaches the communicator's lock only through this: a launching thread
// holds that lock across an NCCL launch, which can block behind a hung collective (a full launch
// queue, an enqueue that never settles), and a watchdog waiting for it would hang with the job.
template <typename F>
bool run_if_unlocked(std::mutex& mutex, F&& f) {
  std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  f();
  return true;
}

// The communicator: its asynchronous error (ncclCommGetAsyncError) and its abort (ncclCommAbort).
// Both answer only if the communicator's lock is free now (run_if_unlocked), never waiting for it.
class WatchedComm {
 public:
  virtual ~WatchedComm() = default;
  // False while the lock is held. Else true, with `error` set to the error NCCL reports, or left
  // nullopt while there is none (an operation in progress is none).
  virtual bool try_async_error(std::optional<std::string>& error) = 0;
  // Makes the collectives' kernels return; false, with nothing done, while the lock is held. The
  // watchdog calls it until it succeeds, once.
  virtual bool try_abort() = 0;
  // Called first on the watchdog's thread (the CUDA adapter makes the rank's device current there,
  // so that the thread's CUDA calls open no context on device 0).
  virtual void bind_thread() {}
};

struct WatchdogOptions {
  int rank = -1;
  // A collective not finished this long after its launch is a fault (dist.timeout_s).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // After a fault the launching thread's next wait or launch throws it; if the process has not ended
  // this long after the fault (that thread is blocked elsewhere, or caught the error), the watchdog
  // ends it: a rank must not outlive its aborted communicator, blocked where no timeout reaches.
  // Also how long the abort may wait for the communicator's lock (it retries at every poll): past
  // the grace the process ends unaborted, as a launch blocked behind the hung collective never
  // returns the lock.
  std::chrono::milliseconds grace = std::chrono::seconds(10);
  std::chrono::milliseconds interval = std::chrono::milliseconds(100);  // between polls
};

// Watches every collective of one communicator from launch to completion. A pass (poll_once, which
// the thread started by start() calls every `interval`) drops the finished collectives, asks the
// communicator for its asynchronous error (skipped while its lock is held: the deadlines need no
// lock), and times out the collectives older than `timeout`; the first fault found, or reported by
// fail(), is logged, kept, and the communicator aborted (once, as soon as its lock is free).
// Thread-safe; never blocks on the communicator; the interfaces given must outlive the Watchdog.
class Watchdog {
 public:
  // Ends the process after the grace; returns only where a test fakes it.
  using EndProcess = std::function<void(const std::string& fault)>;
  enum class Verdict { kHealthy, kFaulted, kEnded };

  Watchdog(WatchdogOptions options, WatchedComm& comm, WatchdogClock& clock, EndProcess end_process);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A collective just launched: `what` names it ("all_reduce #12"), `step` is the training step or -1.
  void watch(std::string what, int64_t step, std::shared_ptr<WatchedWork> work);
  // Records `reason` as the fault unless one stands, then aborts the communicator if its lock is free
  // (else the watchdog's thread retries); returns the fault that stands. For faults the launching
  // thread finds itself (its own wait timing out).
  std::string fail(const std::string& reason);
  // The fault, once there is one: what every later wait and launch throws.
  std::optional<std::string> fault() const;
  Verdict poll_once();
  std::size_t watched() const;

  void start();
  void stop();

 private:
  struct Entry {
    std::string what;
    int64_t step;
    WatchdogClock::time_point launched;
    std::shared_ptr<WatchedWork> work;
  };
  std::optional<std::string> find_fault(std::vector<Entry>& entries, WatchdogClock::time_point now);
  bool abort_once();
  Verdict after_fault();
  void run();

  const WatchdogOptions options_;
  WatchedComm& comm_;
  WatchdogClock& clock_;
  EndProcess end_process_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  std::optional<std::string> fault_;
  std::string fault_reason_;  // fault_ without the note that the communicator was aborted
  WatchdogClock::time_point fault_at_{};
  bool aborted_ = false;
  bool aborting_ = false;         // a thread is in comm_.try_abort()
  bool abort_postponed_ = false;  // a try found the lock held (logged once)
  bool ended_ = false;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

// How a non-blocking NCCL call stands (ncclCommGetAsyncError): still in progress, done, or failed.
enum class CommProgress { kInProgress, kReady, kError };
// Polls `progress` until it is not kInProgress or `timeout` passes on `clock`; returns the last
// answer (kInProgress: timed out; the caller aborts). Bounds ncclCommInitRankConfig and a launch.
CommProgress wait_until_settled(const std::function<CommProgress()>& progress, WatchdogClock& clock,
                                std::chrono::milliseconds timeout,
                                std::chrono::microseconds interval = std::chrono::milliseconds(1));

}  // namespace moco::dist
