#include "h5/hdf5_basics.h"

#include <cstdlib>
#include <mutex>

namespace moco::h5 {
namespace {

struct ErrorText {
  std::string outer;   // the innermost messages of the API call
  std::string system;  // the operating system's word, from the low-level driver's message
};

// The sec2 driver's message ends in "..., error message = 'No space left on device', ...".
std::string system_error_in(const std::string& desc) {
  const std::string key = "error message = '";
  const auto start = desc.find(key);
  if (start == std::string::npos) return "";
  const auto end = desc.find('\'', start + key.size());
  return desc.substr(start + key.size(), end == std::string::npos ? std::string::npos : end - start - key.size());
}

herr_t collect_error(unsigned depth, const H5E_error2_t* error, void* data) {
  auto& text = *static_cast<ErrorText*>(data);
  if (!error->desc || !*error->desc) return 0;
  if (depth < 3) text.outer += (text.outer.empty() ? "" : "; ") + std::string(error->desc);
  if (text.system.empty()) text.system = system_error_in(error->desc);
  return 0;
}

}  // namespace

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", /*overwrite=*/0);
    // Before the library starts: no H5close at exit. A file whose last flush failed (a full disk)
    // cannot be closed, and HDF5 keeps its handles; its exit-time cleanup then closes them again
    // and crashes (H5D_close from H5_term_library). Every file here is closed explicitly, errors
    // checked, so the cleanup has nothing else to do.
    H5dont_atexit();
  });
  // HDF5's error printing is per thread (a thread-safe build): off on each thread that uses it,
  // such as a checkpoint's writer thread.
  thread_local bool quiet = false;
  if (!quiet) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

std::string error_text() {
  ErrorText text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &text);
  H5Eclear2(H5E_DEFAULT);
  if (text.outer.empty()) text.outer = "HDF5 reported no detail";
  return text.system.empty() ? text.outer : text.outer + "; the system said: " + text.system;
}

}  // namespace moco::h5
