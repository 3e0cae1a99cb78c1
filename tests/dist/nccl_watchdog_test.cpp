// The NCCL watchdog's decisions (dist/nccl_watchdog.h) on CPU, with its clock, the collectives'
// completion events and the communicator's error source and abort faked: the idea of c10d's
// ProcessGroupNCCLErrorsTest. The CUDA adapter itself runs only where a GPU is.
#include "dist/nccl_watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace moco::dist {
namespace {

using namespace std::chrono_literals;

class FakeClock final : public WatchdogClock {
 public:
  time_point now() override { return time_point{} + elapsed; }
  void sleep_for(std::chrono::microseconds span) override { elapsed += span; }
  std::chrono::microseconds elapsed{0};
};

class FakeWork final : public WatchedWork {
 public:
  State state() override { return state_; }
  std::string failure() override { return "cudaErrorLaunchFailure: unspecified launch failure"; }
  std::atomic<State> state_{State::kPending};
};

// Takes its lock as NcclComm takes the communicator's, through run_if_unlocked.
class FakeComm final : public WatchedComm {
 public:
  bool try_async_error(std::optional<std::string>& out) override {
    return run_if_unlocked(lock, [&] {
      ++error_queries;
      out = error;
    });
  }
  bool try_abort() override {
    return run_if_unlocked(lock, [&] { ++aborts; });
  }
  std::mutex lock;  // the communicator's lock, which a launching thread holds across a launch
  std::optional<std::string> error;
  std::atomic<int> aborts{0};
  std::atomic<int> error_queries{0};
};

// A launching thread that holds the communicator's lock, blocked in a launch behind a hung collective,
// until release(). `while_holding` runs first, under the lock. It gives the lock back by itself after
// `at_most`: a watchdog that waits for the lock then fails its test instead of hanging it.
class BlockedLaunch {
 public:
  explicit BlockedLaunch(std::mutex& comm_lock, std::function<void()> while_holding = {},
                         std::chrono::milliseconds at_most = 5s) {
    thread_ = std::thread([this, &comm_lock, while_holding, at_most] {
      std::lock_guard<std::mutex> held(comm_lock);
      if (while_holding) while_holding();
      std::unique_lock<std::mutex> lock(mutex_);
      holding_ = true;
      changed_.notify_all();
      changed_.wait_for(lock, at_most, [this] { return released_; });
    });
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return holding_; });
  }
  ~BlockedLaunch() { release(); }
  BlockedLaunch(const BlockedLaunch&) = delete;
  BlockedLaunch& operator=(const BlockedLaunch&) = delete;

  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool holding_ = false;
  bool released_ = false;
  std::thread thread_;
};

WatchdogOptions options() {
  WatchdogOptions o;
  o.rank = 3;
  o.timeout = 300s;
  o.grace = 10s;
  return o;
}

// A watchdog over fakes; `ended` collects what EndProcess was given.
struct Fixture {
  FakeClock clock;
  FakeComm comm;
  std::vector<std::string> ended;
  Watchdog watchdog{options(), comm, clock, [this](const std::string& fault) { ended.push_back(fault); }};

  std::shared_ptr<FakeWork> launch(const std::string& what, int64_t step) {
    auto work = std::make_shared<FakeWork>();
    watchdog.watch(what, step, work);
    return work;
  }
};

TEST(NcclWatchdog, NothingIsAbortedWhenEveryCollectiveCompletesInTime) {
  Fixture f;
  auto first = f.launch("all_reduce #1", 1);
  auto second = f.launch("all_to_all #2", 1);
  f.clock.elapsed = 299s;
  first->state_ = WatchedWork::State::kDone;
  second->state_ = WatchedWork::State::kDone;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy);
  EXPECT_EQ(f.watchdog.watched(), 0u) << "finished collectives are dropped";
  f.clock.elapsed = 3600s;  // long after: nothing left to time out
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy);
  EXPECT_EQ(f.comm.aborts, 0);
  EXPECT_FALSE(f.watchdog.fault());
  EXPECT_TRUE(f.ended.empty());
}

TEST(NcclWatchdog, TimesOutAtTheDeadlineNamingStepCollectiveAndTimeout) {
  Fixture f;
  auto done = f.launch("broadcast #4", 6);
  f.clock.elapsed = 10s;
  auto hung = f.launch("all_reduce #5", 7);
  done->state_ = WatchedWork::State::kDone;
  f.clock.elapsed = 309s;  // 1 s before all_reduce #5's deadline
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy);
  EXPECT_EQ(f.watchdog.watched(), 1u);
  f.clock.elapsed = 310s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 1);
  const std::string fault = f.watchdog.fault().value_or("");
  EXPECT_NE(fault.find("all_reduce #5 of step 7 did not finish within 300 s"), std::string::npos) << fault;
  EXPECT_NE(fault.find("aborted its NCCL communicator"), std::string::npos) << fault;
  EXPECT_EQ(fault.find("broadcast"), std::string::npos) << fault;
}

TEST(NcclWatchdog, AbortsOnceHoweverManyFaultsFollow) {
  Fixture f;
  f.launch("all_reduce #1", 1);
  f.launch("all_reduce #2", 1);
  f.clock.elapsed = 301s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  ASSERT_TRUE(f.watchdog.fault());
  const std::string first = *f.watchdog.fault();
  f.comm.error = "unhandled system error";
  for (int i = 0; i < 5; ++i) f.watchdog.poll_once();
  EXPECT_EQ(f.watchdog.fail("wait_host timed out"), first) << "the first fault stands";
  f.launch("all_reduce #3", 2);  // a launch racing the abort is not watched
  EXPECT_EQ(f.watchdog.watched(), 0u);
  EXPECT_EQ(f.comm.aborts, 1);
  EXPECT_NE(first.find("all_reduce #1"), std::string::npos) << first;
}

TEST(NcclWatchdog, AsyncErrorAbortsBeforeTheTimeoutAndNamesTheCollective) {
  Fixture f;
  f.launch("all_to_all #9", 12);
  f.clock.elapsed = 1s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy);
  f.comm.error = "remote process exited or there was a network error (peer rank 5)";
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 1);
  const std::string fault = f.watchdog.fault().value_or("");
  EXPECT_NE(fault.find("asynchronous error while all_to_all #9 of step 12 was in flight"), std::string::npos) << fault;
  EXPECT_NE(fault.find("peer rank 5"), std::string::npos) << fault;
}

TEST(NcclWatchdog, AsyncErrorWithNothingInFlightIsAFaultToo) {
  Fixture f;
  f.comm.error = "unhandled cuda error";
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 1);
  EXPECT_NE(f.watchdog.fault().value_or("").find("unhandled cuda error"), std::string::npos);
}

TEST(NcclWatchdog, ACollectiveThatFinishedBeforeTheWatchdogLookedIsNoFault) {
  Fixture f;
  auto work = f.launch("all_reduce #1", -1);
  f.clock.elapsed = 400s;  // the poll comes late, but the event says done
  work->state_ = WatchedWork::State::kDone;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy);
  EXPECT_EQ(f.comm.aborts, 0);
}

TEST(NcclWatchdog, LateCompletionAfterTheTimeoutLeavesTheFaultStanding) {
  Fixture f;
  auto work = f.launch("all_reduce #1", -1);
  f.clock.elapsed = 300s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  work->state_ = WatchedWork::State::kDone;  // the abort makes the kernel return
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  const std::string fault = f.watchdog.fault().value_or("");
  EXPECT_NE(fault.find("all_reduce #1 did not finish"), std::string::npos) << fault;
  EXPECT_EQ(fault.find("of step"), std::string::npos) << "no step known: none named: " << fault;
  EXPECT_EQ(f.comm.aborts, 1);
}

TEST(NcclWatchdog, AFailedEventQueryIsAFault) {
  Fixture f;
  auto work = f.launch("all_gather #2", 3);
  work->state_ = WatchedWork::State::kFailed;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_NE(f.watchdog.fault().value_or("").find("all_gather #2 of step 3: cudaErrorLaunchFailure"), std::string::npos);
  EXPECT_EQ(f.comm.aborts, 1);
}

TEST(NcclWatchdog, EndsTheProcessOnceAfterTheGraceUnlessItEnded) {
  Fixture f;
  f.launch("all_reduce #1", 4);
  f.clock.elapsed = 300s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  f.clock.elapsed = 309s;  // the grace (10 s) not yet over: the launching thread may still throw
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_TRUE(f.ended.empty());
  f.clock.elapsed = 310s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  ASSERT_EQ(f.ended.size(), 1u);
  EXPECT_EQ(f.ended[0], f.watchdog.fault().value_or(""));
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  EXPECT_EQ(f.ended.size(), 1u);
}

TEST(NcclWatchdog, AFaultTheLaunchingThreadReportsAbortsAndStartsTheGrace) {
  Fixture f;
  f.clock.elapsed = 5s;
  const std::string fault = f.watchdog.fail("barrier #3 did not finish within 300 s");
  EXPECT_EQ(f.comm.aborts, 1);
  EXPECT_NE(fault.find("barrier #3"), std::string::npos);
  f.clock.elapsed = 14s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  f.clock.elapsed = 15s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  EXPECT_EQ(f.ended.size(), 1u);
}

// The thread: a collective that never finishes is aborted and the process "ended", on the real clock.
TEST(NcclWatchdog, ThreadAbortsAHungCollectiveAndEndsAfterTheGrace) {
  RunningClock clock;
  FakeComm comm;
  std::atomic<int> ended{0};
  WatchdogOptions o = options();
  o.timeout = 50ms;
  o.grace = 50ms;
  o.interval = 5ms;
  Watchdog watchdog(o, comm, clock, [&](const std::string&) { ++ended; });
  auto work = std::make_shared<FakeWork>();
  watchdog.start();
  watchdog.watch("all_reduce #1", 1, work);
  // Up to 10 s: on a loaded machine a starved thread counts as frozen (RunningClock), and waits longer.
  for (int i = 0; i < 1000 && ended == 0; ++i) std::this_thread::sleep_for(10ms);
  watchdog.stop();
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_EQ(ended, 1);
}

TEST(NcclWatchdog, ThreadLeavesCollectivesThatFinishAlone) {
  RunningClock clock;
  FakeComm comm;
  WatchdogOptions o = options();
  o.timeout = 200ms;
  o.interval = 5ms;
  Watchdog watchdog(o, comm, clock, [](const std::string&) {});
  watchdog.start();
  for (int i = 0; i < 20; ++i) {
    auto work = std::make_shared<FakeWork>();
    watchdog.watch("all_reduce #" + std::to_string(i), i, work);
    std::this_thread::sleep_for(10ms);
    work->state_ = WatchedWork::State::kDone;
  }
  std::this_thread::sleep_for(300ms);
  watchdog.stop();
  EXPECT_EQ(comm.aborts, 0);
  EXPECT_FALSE(watchdog.fault());
  EXPECT_EQ(watchdog.watched(), 0u);
}

// Note [The watchdog never waits on the communicator's lock]
// A launch holds the communicator's lock, and a launch can block behind a hung collective. A
// watchdog that waited for the lock would hang with the job; it tries the lock instead: the
// asynchronous error waits for a free lock, the deadlines do not, and an abort that finds the lock
// held is retried until the grace ends the process.
TEST(NcclWatchdog, WhileALaunchHoldsTheLockTheDeadlinesStillHold) {
  Fixture f;
  f.launch("all_reduce #1", 4);
  f.comm.error = "unhandled system error";
  BlockedLaunch blocked(f.comm.lock);
  f.clock.elapsed = 1s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kHealthy) << "the error cannot be read yet: no fault";
  EXPECT_EQ(f.comm.error_queries, 0);
  f.clock.elapsed = 300s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_NE(f.watchdog.fault().value_or("").find("all_reduce #1 of step 4 did not finish within 300 s"),
            std::string::npos);
  EXPECT_EQ(f.comm.aborts, 0) << "the lock is held: the abort must not wait for it";
}

TEST(NcclWatchdog, AnAbortThatFindsTheLockHeldIsRetriedOnceItIsFree) {
  Fixture f;
  f.launch("all_reduce #1", 4);
  BlockedLaunch blocked(f.comm.lock);
  f.clock.elapsed = 300s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  f.clock.elapsed = 305s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 0);
  blocked.release();  // the launch returned
  f.clock.elapsed = 306s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 1);
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  EXPECT_EQ(f.comm.aborts, 1) << "aborted once";
  f.clock.elapsed = 310s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  ASSERT_EQ(f.ended.size(), 1u);
  EXPECT_EQ(f.ended[0], f.watchdog.fault().value_or("")) << "aborted in the end: the fault as it stands";
}

TEST(NcclWatchdog, AnAbortThatNeverGetsTheLockEndsTheProcessAfterTheGraceSayingSo) {
  Fixture f;
  f.launch("all_reduce #1", 4);
  BlockedLaunch blocked(f.comm.lock);
  f.clock.elapsed = 300s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kFaulted);
  f.clock.elapsed = 310s;
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  EXPECT_EQ(f.comm.aborts, 0);
  ASSERT_EQ(f.ended.size(), 1u);
  EXPECT_NE(f.ended[0].find("all_reduce #1 of step 4 did not finish within 300 s"), std::string::npos) << f.ended[0];
  EXPECT_NE(f.ended[0].find("could not abort its NCCL communicator: a launching thread held its lock throughout the "
                            "10 s grace"),
            std::string::npos)
      << f.ended[0];
  blocked.release();
  EXPECT_EQ(f.watchdog.poll_once(), Watchdog::Verdict::kEnded);
  EXPECT_EQ(f.comm.aborts, 0) << "nothing is aborted once the process is ending";
}

// The thread, on the real clock: a launch that registered its collective and then blocked, holding
// the lock, does not keep the watchdog from ending the process within timeout + grace.
TEST(NcclWatchdog, ThreadEndsTheProcessWhileABlockedLaunchHoldsTheLock) {
  RunningClock clock;
  FakeComm comm;
  std::atomic<int> ended{0};
  std::mutex fault_mutex;
  std::string fault;
  WatchdogOptions o = options();
  o.timeout = 50ms;
  o.grace = 50ms;
  o.interval = 5ms;
  Watchdog watchdog(o, comm, clock, [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(fault_mutex);
    fault = why;
    ++ended;
  });
  watchdog.start();
  const auto start = std::chrono::steady_clock::now();
  int ended_while_blocked = 0;
  {
    // Up to 10 s: on a loaded machine a starved thread counts as frozen (RunningClock), and waits longer.
    BlockedLaunch blocked(
        comm.lock, [&] { watchdog.watch("all_reduce #7", 2, std::make_shared<FakeWork>()); }, 10s);
    for (int i = 0; i < 1000 && ended == 0; ++i) std::this_thread::sleep_for(10ms);
    ended_while_blocked = ended;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  watchdog.stop();
  EXPECT_EQ(ended_while_blocked, 1) << "the watchdog waited for the communicator's lock";
  EXPECT_LT(took, 10s);
  EXPECT_EQ(comm.aborts, 0);
  std::lock_guard<std::mutex> lock(fault_mutex);
  EXPECT_NE(fault.find("all_reduce #7 of step 2 did not finish"), std::string::npos) << fault;
  EXPECT_NE(fault.find("could not abort"), std::string::npos) << fault;
}

TEST(NcclWatchdogSettle, ReturnsOnceNoLongerInProgress) {
  FakeClock clock;
  int polls = 0;
  const auto progress = [&] { return ++polls < 4 ? CommProgress::kInProgress : CommProgress::kReady; };
  EXPECT_EQ(wait_until_settled(progress, clock, 300s), CommProgress::kReady);
  EXPECT_EQ(polls, 4);
}

TEST(NcclWatchdogSettle, AnInitThatNeverSettlesTimesOutAtTheDeadline) {
  FakeClock clock;
  const auto never = [] { return CommProgress::kInProgress; };
  EXPECT_EQ(wait_until_settled(never, clock, 2s, 100ms), CommProgress::kInProgress);
  EXPECT_GE(clock.elapsed, 2s);
  EXPECT_LT(clock.elapsed, 2s + 200ms) << "polls until the deadline, not beyond";
}

TEST(NcclWatchdogSettle, AnErrorEndsTheWaitAtOnce) {
  FakeClock clock;
  EXPECT_EQ(wait_until_settled([] { return CommProgress::kError; }, clock, 2s), CommProgress::kError);
  EXPECT_EQ(clock.elapsed, 0s);
}

TEST(NcclWatchdogClock, TimeWhileFrozenDoesNotCount) {
  auto base = std::chrono::steady_clock::time_point{} + 1000s;
  RunningClock clock([&] { return base; });
  const auto start = clock.now();
  base += 100ms;
  EXPECT_EQ(clock.now() - start, 100ms);
  base += 60s;  // a gap no poll leaves: the process was stopped
  EXPECT_EQ(clock.now() - start, 100ms);
  base += 200ms;
  EXPECT_EQ(clock.now() - start, 300ms);
}

TEST(NcclWatchdogStep, NotedStepIsWhatTheWatchdogReads) {
  const int64_t before = noted_step();
  note_step(41);
  EXPECT_EQ(noted_step(), 41);
  note_step(before);
}

}  // namespace
}  // namespace moco::dist
