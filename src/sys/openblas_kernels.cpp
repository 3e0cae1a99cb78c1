// Linked into every executable (an OBJECT library in link_libraries, CMakeLists.txt): no header, no
// call; it acts before main().
//
// OpenBLAS picks its kernels from the CPU's model number. A CPU it does not know -- the usual case on
// virtual machines, whose CPUID says "Intel(R) Xeon(R) Processor" -- gets its generic "Prescott"
// SSE3 kernels: here that is 48 GFLOP/s for a 1024^3 SGEMM on two cores against 255 with the
// AVX-512 ("SkylakeX") kernels the same CPU runs, and the queue logits, the kNN monitor and the fully
// connected layers all go through SGEMM. OpenBLAS reads its one override, OPENBLAS_CORETYPE, while the
// library is loaded, before any code of ours runs; so when it has fallen back and the CPU has AVX2 or
// AVX-512, the process restarts itself (same pid, arguments and environment, before MPI or any thread
// starts) with OPENBLAS_CORETYPE naming the kernels for its features. A user's OPENBLAS_CORETYPE,
// another BLAS (the PyPI LibTorch carries MKL), or a CPU OpenBLAS recognises: nothing happens.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

// OpenBLAS's name for the best kernels this CPU can run, or nullptr.
const char* kernels_for_this_cpu() {
  __builtin_cpu_init();  // needed in a constructor: the compiler's own may not have run yet
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

__attribute__((constructor)) void restart_with_openblas_kernels_for_this_cpu() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice, or ours after the restart
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr || std::strcmp(core_name(), "Prescott") != 0) return;
  const char* kernels = kernels_for_this_cpu();
  if (kernels == nullptr) return;
  std::vector<std::string> args = own_arguments();
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("OPENBLAS_CORETYPE", kernels, 1);
  execv("/proc/self/exe", argv.data());
  unsetenv("OPENBLAS_CORETYPE");  // the restart failed: carry on with the generic kernels
}

}  // namespace
