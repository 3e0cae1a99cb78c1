// defines: the stop signals of a process (SIGUSR1, SIGTERM, SIGINT, SIGHUP): install_preemption_handlers,
// preemption_signal, signal_name. The handler only records the signal; the training loop looks at each
// step boundary, agrees with the other ranks and checkpoints.
#pragma once

namespace moco::preempt {

// SIGUSR1 (Slurm's --signal=B:USR1@N, forwarded by the batch script or by mpirun), SIGTERM
// (preemption, scancel, mpirun's shutdown), SIGINT (Ctrl-C) and SIGHUP (the terminal closed) are
// recorded instead of ending the process. A second SIGTERM, SIGINT or SIGHUP ends it at once, the
// default way, for when a graceful stop is not wanted; a second SIGUSR1 is only recorded.
void install_preemption_handlers();

// The first signal recorded, or 0.
int preemption_signal();

// Records `sig` as if it had come (unless one came already): the run stops as that signal stops it,
// after the ranks' next agreement, with a checkpoint. For a cause the program finds itself (its
// output folder's lock file deleted under it: run/run_output.h).
void request_stop(int sig);

// "SIGUSR1", "SIGTERM", "SIGINT", "SIGHUP" (or "another signal").
const char* signal_name(int sig);

// A rank's signal as a number whose sum over ranks (one all-reduce) still tells which was seen: one
// base-1000 digit per signal, so fewer than 1000 ranks never carry into the next. SIGTERM (the job is
// going away) outranks SIGINT, SIGINT SIGHUP, SIGHUP SIGUSR1 (checkpoint and requeue); 0 for none.
double signal_code(int sig);
int signal_from_code(double sum);

// For tests: forget the recorded signal.
void reset_preemption();

}  // namespace moco::preempt
