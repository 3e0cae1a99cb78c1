#include "preempt/preemption.h"

#include <atomic>
#include <csignal>

namespace moco::preempt {
namespace {

std::atomic<int> recorded{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler must be async-signal-safe");

// Lowest rank first: signal_code(kRanked[i]) is 1000^i.
constexpr int kRanked[] = {SIGUSR1, SIGHUP, SIGINT, SIGTERM};

void on_signal(int sig) {
  int none = 0;
  if (!recorded.compare_exchange_strong(none, sig) && sig != SIGUSR1) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

void install_preemption_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int sig : kRanked) sigaction(sig, &action, nullptr);
}

int preemption_signal() { return recorded.load(); }

void request_stop(int sig) {
  int none = 0;
  recorded.compare_exchange_strong(none, sig);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGUSR1:
      return "SIGUSR1";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "another signal";
  }
}

double signal_code(int sig) {
  double code = 1.0;
  for (const int ranked : kRanked) {
    if (sig == ranked) return code;
    code *= 1000.0;
  }
  return 0.0;
}

int signal_from_code(double sum) {
  int found = 0;
  double code = 1.0;
  for (const int ranked : kRanked) {
    if (sum >= code) found = ranked;
    code *= 1000.0;
  }
  return found;
}

void reset_preemption() { recorded.store(0); }

}  // namespace moco::preempt
