// defines: what every user of HDF5's C API here shares: Handle (closes any hid_t), init_once (quiet,
// no file locks), error_text (the error stack as text). Below src/ckpt and src/data, which both write
// HDF5 files. Included by .cpp files only: <hdf5.h> stays out of other headers.
#pragma once

#include <hdf5.h>

#include <string>

namespace moco::h5 {

// HDF5 prints its error stack to stderr by default; callers turn each failure into one exception
// with the innermost messages instead (error_text). Also: no HDF5 file locks unless the user asks
// for them (HDF5_USE_FILE_LOCKING). And no cleanup at exit (H5dont_atexit): see the .cpp. Every file here has one
// writer by construction (a checkpoint's rank in its .tmp folder, a shard's packing thread under a temporary name), and
// flock fails on many cluster file systems (NFS, Lustre), where HDF5 would then refuse to open anything.
void init_once();

// The innermost messages of HDF5's error stack, and the system's error (errno's text) where the
// low-level driver reported one; the stack is then cleared.
std::string error_text();

// Closes an HDF5 handle of any kind when it goes out of scope.
class Handle {
 public:
  explicit Handle(hid_t id = -1) : id_(id) {}
  ~Handle() {
    if (id_ >= 0) H5Idec_ref(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
};

}  // namespace moco::h5
