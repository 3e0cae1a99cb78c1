#include "h5/hdf5_basics.h"

#include <cstdlib>
#include <mutex>

namespace moco::h5 {
namespace {

herr_t collect_error(unsigned depth, const H5E_error2_t* error, void* data) {
  auto& text = *static_cast<std::string*>(data);
  if (depth < 3 && error->desc && *error->desc) text += (text.empty() ? "" : "; ") + std::string(error->desc);
  return 0;
}

}  // namespace

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", /*overwrite=*/0);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

std::string error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "HDF5 reported no detail" : text;
}

}  // namespace moco::h5
