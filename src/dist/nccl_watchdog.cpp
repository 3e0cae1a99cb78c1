#include "dist/nccl_watchdog.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <utility>

namespace moco::dist {
namespace {

std::atomic<int64_t> g_noted_step{-1};

// "300 s", "0.05 s". A name of its own: the unity build puts this file beside mpi_process_group.cpp.
std::string watchdog_span_text(std::chrono::milliseconds span) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(span.count()) / 1000.0);
  return text;
}

std::string collective_label(const std::string& what, int64_t step) {
  return step >= 0 ? what + " of step " + std::to_string(step) : what;
}

}  // namespace

void note_step(int64_t step) { g_noted_step.store(step, std::memory_order_relaxed); }
int64_t noted_step() { return g_noted_step.load(std::memory_order_relaxed); }

// ------------------------------------------------------------------------------------ RunningClock

RunningClock::RunningClock(std::function<time_point()> base)
    : base_(base ? std::move(base) : std::function<time_point()>([] { return std::chrono::steady_clock::now(); })) {}

RunningClock::time_point RunningClock::now() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = base_();
  if (last_ && now - *last_ > kFrozen) frozen_ += now - *last_;
  last_ = now;
  return now - frozen_;
}

// ---------------------------------------------------------------------------------------- Watchdog

Watchdog::Watchdog(WatchdogOptions options, WatchedComm& comm, WatchdogClock& clock, EndProcess end_process)
    : options_(options), comm_(comm), clock_(clock), end_process_(std::move(end_process)) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::watch(std::string what, int64_t step, std::shared_ptr<WatchedWork> work) {
  const auto launched = clock_.now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (fault_) return;  // nothing more is watched once the communicator is aborted
  entries_.push_back(Entry{std::move(what), step, launched, std::move(work)});
}

std::string Watchdog::fail(const std::string& reason) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fault_) return *fault_;
    fault_reason_ = reason;
    fault_ = reason + " (this rank aborted its NCCL communicator)";
    fault_at_ = clock_.now();
    entries_.clear();
    message = *fault_;
  }
  spdlog::critical("rank {}: NCCL watchdog: {}", options_.rank, message);
  abort_once();
  return message;
}

// Aborts the communicator unless that is done or under way on another thread; true once done. Outside
// mutex_: a launching thread holds the communicator's lock while it registers a collective here.
bool Watchdog::abort_once() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_ || aborting_) return aborted_;
    aborting_ = true;
  }
  const bool done = comm_.try_abort();
  bool first_postponement = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborting_ = false;
    aborted_ = done;
    first_postponement = !done && !abort_postponed_;
    abort_postponed_ = abort_postponed_ || !done;
  }
  if (first_postponement) {
    spdlog::critical(
        "rank {}: NCCL watchdog: the communicator's lock is held (a launch in progress, perhaps blocked "
        "behind the hung collective); the abort is retried until {} after the fault, then the process ends",
        options_.rank, watchdog_span_text(options_.grace));
  }
  return done;
}

std::optional<std::string> Watchdog::fault() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fault_;
}

std::size_t Watchdog::watched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

// Drops the finished entries of `entries`; returns the first fault among the rest and the
// communicator's asynchronous error, which comes first: it says more than a timeout. The error is
// not known while a launching thread holds the communicator's lock; the deadlines still hold then.
std::optional<std::string> Watchdog::find_fault(std::vector<Entry>& entries, WatchdogClock::time_point now) {
  std::optional<std::string> timed_out;
  std::vector<Entry> pending;
  for (auto& e : entries) {
    const WatchedWork::State state = e.work->state();
    if (state == WatchedWork::State::kDone) continue;
    if (state == WatchedWork::State::kFailed && !timed_out) {
      timed_out = collective_label(e.what, e.step) + ": " + e.work->failure();
    } else if (now - e.launched >= options_.timeout && !timed_out) {
      timed_out = collective_label(e.what, e.step) + " did not finish within " + watchdog_span_text(options_.timeout) +
                  "; a peer rank has probably died, hung, or called a different collective";
    }
    pending.push_back(std::move(e));
  }
  entries = std::move(pending);
  std::optional<std::string> error;
  if (comm_.try_async_error(error) && error) {
    const std::string during =
        entries.empty() ? ""
                        : " while " + collective_label(entries.front().what, entries.front().step) + " was in flight";
    return "NCCL reported an asynchronous error" + during + ": " + *error;
  }
  return timed_out;
}

// A fault stands: retries an abort that found the communicator's lock held, and ends the process
// once the grace has passed. Unaborted by then, a launch holds the lock and will not give it back.
Watchdog::Verdict Watchdog::after_fault() {
  const bool aborted = abort_once();
  std::string end_with;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_) return Verdict::kEnded;
    if (clock_.now() - fault_at_ < options_.grace) return Verdict::kFaulted;
    ended_ = true;
    end_with = aborted
                   ? *fault_
                   : fault_reason_ +
                         " (this rank could not abort its NCCL communicator: a launching thread held its "
                         "lock throughout the " +
                         watchdog_span_text(options_.grace) + " grace, probably blocked behind the hung collective)";
  }
  end_process_(end_with);
  return Verdict::kEnded;
}

Watchdog::Verdict Watchdog::poll_once() {
  std::vector<Entry> entries;
  bool faulted = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_) return Verdict::kEnded;
    faulted = fault_.has_value();
    if (!faulted) entries.swap(entries_);
  }
  if (faulted) return after_fault();
  // The queries run outside mutex_, so that launches can register meanwhile.
  std::optional<std::string> found = find_fault(entries, clock_.now());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fault_) return Verdict::kFaulted;  // fail() came from the launching thread meanwhile
    // Launches registered meanwhile went to entries_; the older ones go first again.
    entries.insert(entries.end(), std::make_move_iterator(entries_.begin()), std::make_move_iterator(entries_.end()));
    entries_ = std::move(entries);
  }
  if (!found) return Verdict::kHealthy;
  fail(*found);
  return Verdict::kFaulted;
}

void Watchdog::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void Watchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Watchdog::run() {
  comm_.bind_thread();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Waits on the real clock: the interval only paces the polls, the deadlines are clock_'s.
      wake_.wait_for(lock, options_.interval, [this] { return stopping_; });
      if (stopping_) return;
    }
    if (poll_once() == Verdict::kEnded) return;
  }
}

// ------------------------------------------------------------------------------ wait_until_settled

CommProgress wait_until_settled(const std::function<CommProgress()>& progress, WatchdogClock& clock,
                                std::chrono::milliseconds timeout, std::chrono::microseconds interval) {
  const auto deadline = clock.now() + timeout;
  for (;;) {
    const CommProgress now = progress();
    if (now != CommProgress::kInProgress) return now;
    if (clock.now() >= deadline) return CommProgress::kInProgress;
    clock.sleep_for(interval);
  }
}

}  // namespace moco::dist
