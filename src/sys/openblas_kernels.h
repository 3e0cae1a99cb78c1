// defines: openblas_settings_line -- what src/sys/openblas_kernels.cpp did to OpenBLAS before main();
// openblas_kernels_to_set, its decision on the kernels
#pragma once

#include <string>

namespace moco::sys {

// One line for the log at start: the kernels OpenBLAS runs and its threads' spin timeout, each with
// who chose it (this program at its restart, the user's variable, OpenBLAS itself), and how to turn
// the settings off; or that the BLAS is not OpenBLAS. Defined in the OBJECT library every executable
// links (CMakeLists.txt), not in moco_core.
std::string openblas_settings_line();

// The OPENBLAS_CORETYPE to restart with: `best` (the kernels this CPU's features allow, or nullptr)
// when OpenBLAS fell back to its generic kernels (`detected` is "Prescott") and the user set none
// (`user` is nullptr); otherwise nullptr. Pure, so that a test can feed it what no machine here
// shows (this project's CI machines are CPUs OpenBLAS knows).
const char* openblas_kernels_to_set(const char* user, const char* detected, const char* best);

}  // namespace moco::sys
