// Prints the OpenBLAS settings this process runs with, after src/sys/openblas_kernels.cpp (linked
// into every executable) had its say: for tests/cli/openblas_kernels_test.sh.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

int main() {
  using Query = int (*)();
  const auto parallel = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto threads = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const char* timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  std::printf("parallel %d threads %d timeout %s\n", parallel ? parallel() : -1, threads ? threads() : -1,
              timeout ? timeout : "unset");
  return 0;
}
