// defines: restart_with_openblas_settings (OpenBLAS's kernels and thread timeout for this machine, by
// a restart of the process), openblas_settings_line (what it did), openblas_kernels_to_set (its
// decision on the kernels)
#pragma once

#include <string>

namespace moco::sys {

// The first line of every main(): where OpenBLAS fell back to its generic kernels on a CPU it does
// not know, or spins its threads between calls, re-executes this program (same pid, arguments and
// environment) with OPENBLAS_CORETYPE / OPENBLAS_THREAD_TIMEOUT set, which OpenBLAS reads only when it
// is loaded (the .cpp says why each matters). Returns where nothing needs to change, where the user
// set the variable, under MOCO_OPENBLAS_SETTINGS=0, or in the restarted process. Call it before MPI
// or any thread of ours starts.
void restart_with_openblas_settings();

// One line for the log at start: the kernels OpenBLAS runs and its threads' spin timeout, each with
// who chose it (this program at its restart, the user's variable, OpenBLAS itself), and how to turn
// the settings off; or that the BLAS is not OpenBLAS.
std::string openblas_settings_line();

// The OPENBLAS_CORETYPE to restart with: `best` (the kernels this CPU's features allow, or nullptr)
// when OpenBLAS fell back to its generic kernels (`detected` is "Prescott") and the user set none
// (`user` is nullptr); otherwise nullptr. Pure, so that a test can feed it what no machine here
// shows (this project's CI machines are CPUs OpenBLAS knows).
const char* openblas_kernels_to_set(const char* user, const char* detected, const char* best);

}  // namespace moco::sys
