// defines: the preemption signals of a process (SIGUSR1, SIGTERM): install_preemption_handlers,
// preemption_signal. The handler only records the signal; the training loop looks at each step
// boundary, agrees with the other ranks and checkpoints.
#pragma once

namespace moco::preempt {

// SIGUSR1 (Slurm's --signal=B:USR1@N, forwarded by the batch script or by mpirun) and SIGTERM
// (preemption, scancel, mpirun's shutdown) are recorded instead of ending the process. A second
// SIGTERM ends it at once, the default way, for when a graceful stop is not wanted.
void install_preemption_handlers();

// The first signal recorded (SIGUSR1 or SIGTERM), or 0.
int preemption_signal();

// A rank's signal as a number whose sum over ranks (one all-reduce) still tells which was seen:
// SIGTERM (the job is going away) outranks SIGUSR1 (checkpoint and requeue); 0 for none.
double signal_code(int sig);
int signal_from_code(double sum);

// For tests: forget the recorded signal.
void reset_preemption();

}  // namespace moco::preempt
