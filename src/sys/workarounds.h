// defines: log_workarounds -- the process-wide settings made for speed, each in one line at start
#pragma once

namespace moco::sys {

// Logs (info) what keep_freed_host_memory (sys/host_memory.h) and the OpenBLAS restart
// (sys/openblas_kernels.h) did in this process, each with the variable that turns it off. Call once
// logging is set up.
void log_workarounds();

}  // namespace moco::sys
