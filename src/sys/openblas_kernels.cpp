// restart_with_openblas_settings(), the first line of every main(). OpenBLAS reads its settings while
// the library is loaded, before any code of ours runs, so where one of the two below must change, the
// process restarts itself (same pid, arguments and environment, before MPI or any thread of ours
// starts) with the variable set. A value the
// user set is never overridden, and another BLAS (the PyPI LibTorch carries MKL) is left alone.
// MOCO_OPENBLAS_SETTINGS=0 turns it off: no restart, nothing set. It cannot log (logging is not
// set up yet): openblas_settings_line() (the header) says afterwards what it did.
//
// Kernels. OpenBLAS picks them from the CPU's model number. A CPU it does not know -- the usual case
// on virtual machines, whose CPUID says "Intel(R) Xeon(R) Processor" -- gets the generic "Prescott"
// SSE3 kernels: here 48 GFLOP/s for a 1024^3 SGEMM on two cores against 255 with the AVX-512
// ("SkylakeX") kernels the same CPU runs, and the queue logits, the kNN monitor and the fully
// connected layers all go through SGEMM. When it has fallen back and the CPU has AVX2 or AVX-512,
// OPENBLAS_CORETYPE names the kernels for its features.
//
// Spinning. A pthreads OpenBLAS keeps its worker threads spinning after each call for 2^28 cycles
// (about 0.1 s) in case another call follows. LibTorch's own parallel code runs on a second pool, of
// OpenMP threads, on the same cores: after the contrastive head's two GEMMs OpenBLAS's spinners take
// a core from the encoder's backward. On this project's 2-core VM a resnet_tiny step ran at 0.84-0.87
// of its floor (bench_step --only tiny28, 5 runs) with OpenBLAS's default, and at 0.88-0.95 (5 runs)
// with OPENBLAS_THREAD_TIMEOUT=16: 2^16 cycles, tens of microseconds, still no sleep between
// back-to-back GEMMs.
#include "sys/openblas_kernels.h"

#include <dlfcn.h>
#include <errno.h>
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
  __builtin_cpu_init();  // harmless where the compiler's own already ran
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

// OpenBLAS's threading: 0 single-threaded, 1 pthreads, 2 OpenMP (whose threads are LibTorch's own).
bool openblas_spins_in_own_threads() {
  using Query = int (*)();
  const auto parallel = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto threads = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return parallel != nullptr && threads != nullptr && parallel() == 1 && threads() > 1;
}

// The kernels OpenBLAS runs, or nullptr where the BLAS is not OpenBLAS.
const char* openblas_core_name() {
  using CoreName = char* (*)();
  const auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return core_name != nullptr ? core_name() : nullptr;
}

const char* kernels_to_set() {
  return moco::sys::openblas_kernels_to_set(std::getenv("OPENBLAS_CORETYPE"), openblas_core_name(),
                                            kernels_for_this_cpu());
}

// What restart_with_openblas_settings() did, for openblas_settings_line().
struct Done {
  bool switched_off = false;
  bool set_kernels = false;
  bool set_timeout = false;
};
Done done;

// Tells the restarted process what its first run set; read and cleared there, so no child inherits it.
constexpr const char* kRestartNote = "MOCO_OPENBLAS_RESTARTED_WITH";

bool settings_switched_off() {
  const char* value = std::getenv("MOCO_OPENBLAS_SETTINGS");
  return value != nullptr && std::strcmp(value, "0") == 0;
}

// What /proc/self/exe points to, while that file is still there; else the link itself.
std::string own_path() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "/proc/self/exe";
  const std::string path(buffer, static_cast<size_t>(n));
  return access(path.c_str(), X_OK) == 0 ? path : "/proc/self/exe";
}

}  // namespace

namespace moco::sys {

void restart_with_openblas_settings() {
  if (settings_switched_off()) {
    done.switched_off = true;
    return;
  }
  if (const char* note = std::getenv(kRestartNote)) {  // the restarted process: OpenBLAS has its settings now
    done.set_kernels = std::strstr(note, "OPENBLAS_CORETYPE") != nullptr;
    done.set_timeout = std::strstr(note, "OPENBLAS_THREAD_TIMEOUT") != nullptr;
    unsetenv(kRestartNote);
    return;
  }
  const char* kernels = kernels_to_set();
  const bool set_timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr && openblas_spins_in_own_threads();
  if (kernels == nullptr && !set_timeout) return;
  std::vector<std::string> args = own_arguments();
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (kernels != nullptr) setenv("OPENBLAS_CORETYPE", kernels, 1);
  if (set_timeout) setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1);
  setenv(kRestartNote,
         kernels != nullptr ? (set_timeout ? "OPENBLAS_CORETYPE OPENBLAS_THREAD_TIMEOUT" : "OPENBLAS_CORETYPE")
                            : "OPENBLAS_THREAD_TIMEOUT",
         1);
  // The binary's own path, not /proc/self/exe: the kernel names a process after the file it runs,
  // and "exe" would hide it from ps and pkill (and from tests that look for moco_dist).
  execv(own_path().c_str(), argv.data());
  // The restart failed: carry on as loaded.
  if (kernels != nullptr) unsetenv("OPENBLAS_CORETYPE");
  if (set_timeout) unsetenv("OPENBLAS_THREAD_TIMEOUT");
  unsetenv(kRestartNote);
}

}  // namespace moco::sys

namespace {

std::string kernels_part(const char* core) {
  const std::string name = std::string("kernels ") + core;
  if (done.set_kernels)
    return name + " set by " + program_invocation_short_name + " (OpenBLAS took this CPU for an unknown one)";
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return name + " as OPENBLAS_CORETYPE asks";
  return name + " as detected";
}

std::string timeout_part() {
  if (done.set_timeout) return std::string("thread timeout 2^16 cycles set by ") + program_invocation_short_name;
  if (const char* user = std::getenv("OPENBLAS_THREAD_TIMEOUT"))
    return std::string("thread timeout ") + user + " as OPENBLAS_THREAD_TIMEOUT asks";
  if (openblas_spins_in_own_threads()) return "thread timeout OpenBLAS's default (2^28 cycles)";
  return "no thread timeout needed (no spinning threads of its own)";
}

}  // namespace

namespace moco::sys {

const char* openblas_kernels_to_set(const char* user, const char* detected, const char* best) {
  if (user != nullptr) return nullptr;  // the user's choice
  if (detected == nullptr || std::strcmp(detected, "Prescott") != 0) return nullptr;
  return best;
}

std::string openblas_settings_line() {
  const char* core = openblas_core_name();
  if (core == nullptr) return "OpenBLAS: not the BLAS here, nothing set";
  const std::string settings = "OpenBLAS: " + kernels_part(core) + ", " + timeout_part();
  if (done.switched_off) return settings + ", nothing set (MOCO_OPENBLAS_SETTINGS=0)";
  return settings + " (MOCO_OPENBLAS_SETTINGS=0 turns this off)";
}

}  // namespace moco::sys
