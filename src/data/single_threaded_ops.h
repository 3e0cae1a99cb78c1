// defines: run_ops_single_threaded (this thread's LibTorch ops stay on this thread)
#pragma once

namespace moco::data {

// For a data loader's worker thread: the LibTorch ops it calls from now on run on this thread alone
// instead of starting a team of intra-op threads of their own, which would compete for the cores
// with the training step's team (and, with OpenMP's spinning waits, cost it more than the work).
// The other threads' settings are untouched.
void run_ops_single_threaded();

}  // namespace moco::data
