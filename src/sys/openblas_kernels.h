// defines: openblas_settings_line -- what src/sys/openblas_kernels.cpp did to OpenBLAS before main()
#pragma once

#include <string>

namespace moco::sys {

// One line for the log at start: the kernels OpenBLAS runs and its threads' spin timeout, each with
// who chose it (this program at its restart, the user's variable, OpenBLAS itself), and how to turn
// the settings off; or that the BLAS is not OpenBLAS. Defined in the OBJECT library every executable
// links (CMakeLists.txt), not in moco_core.
std::string openblas_settings_line();

}  // namespace moco::sys
