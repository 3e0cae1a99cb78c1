// Prints the OpenBLAS settings this process runs with, after src/sys/openblas_kernels.cpp (linked
// into every executable) had its say: for tests/cli/openblas_kernels_test.sh. With --line, prints
// the line moco_dist logs about them instead; with --comm, the process's name as ps and pkill see it
// (/proc/self/comm), which a restart must keep.
#include "sys/openblas_kernels.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  if (argc > 1 && std::strcmp(argv[1], "--line") == 0) {
    std::printf("%s\n", moco::sys::openblas_settings_line().c_str());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--comm") == 0) {
    std::string comm;
    std::getline(std::ifstream("/proc/self/comm"), comm);
    std::cout << comm << "\n";
    return 0;
  }
  using Query = int (*)();
  const auto parallel = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto threads = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  std::printf("parallel %d threads %d coretype %s timeout %s\n", parallel ? parallel() : -1, threads ? threads() : -1,
              coretype ? coretype : "unset", timeout ? timeout : "unset");
  return 0;
}
