// defines: StepAgreement (what every rank agrees on after a training step: the mean loss, rank 0's
// clock, a stop signal any rank saw, the mean accuracies and data wait), agree_on_step (one small
// all-reduce that makes it)
#pragma once

#include "dist/process_group.h"

namespace moco::train {

struct StepAgreement {
  double loss = 0;            // mean over ranks (each rank's 0 when the step was skipped)
  double train_seconds = 0;   // rank 0's training clock after the step (the others give 0)
  int stop_signal = 0;        // SIGUSR1 or SIGTERM if any rank received one, else 0
  double acc1 = 0, acc5 = 0;  // the contrastive task's accuracy (%), mean over ranks
  double data_wait_s = 0;     // seconds waited for the batch, mean over ranks
};

// Collective: `mine` is this rank's own values; returns the agreed ones, the same on every rank (so
// every rank takes the same lr and stops after the same step). One all-reduce of six doubles.
StepAgreement agree_on_step(const StepAgreement& mine, dist::ProcessGroup& group);

}  // namespace moco::train
