#include "preempt/preemption.h"

#include <atomic>
#include <csignal>

namespace moco::preempt {
namespace {

std::atomic<int> recorded{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler must be async-signal-safe");

void on_signal(int sig) {
  int none = 0;
  if (!recorded.compare_exchange_strong(none, sig) && sig == SIGTERM) {
    std::signal(SIGTERM, SIG_DFL);
    std::raise(SIGTERM);
  }
}

}  // namespace

void install_preemption_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int preemption_signal() { return recorded.load(); }

double signal_code(int sig) { return sig == SIGTERM ? 1000.0 : sig == SIGUSR1 ? 1.0 : 0.0; }
int signal_from_code(double sum) { return sum >= 1000.0 ? SIGTERM : sum > 0.0 ? SIGUSR1 : 0; }

void reset_preemption() { recorded.store(0); }

}  // namespace moco::preempt
