// defines: FolderLock (one process at a time writes into a folder: an advisory flock(2) on
// FOLDER/moco.lock, held for the process's life; what moco_dist, moco_lincls and moco_pack take on
// their output folder)
#pragma once

#include <optional>
#include <string>

namespace moco::sys {

// The lock file's name inside the folder it guards.
inline constexpr const char* kFolderLockName = "moco.lock";

// An advisory lock on a folder through FOLDER/moco.lock. The kernel drops a flock when its process
// ends, however it ends (kill -9 included): a lock file left behind never blocks anyone, and no
// process ever has to tell whether a holder is still alive. Works where flock(2) works across the
// machines that share the folder: local file systems, NFSv4 (Linux maps flock to NFS locks), Lustre
// mounted with `flock`; with `localflock`, or NFS with `local_lock=all`/`nolock`, only processes of
// one machine see each other's locks.
class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock() { release(); }

  // Takes the lock of `folder` (which must exist) and writes "HOST PID" into the lock file. Returns
  // nullopt once held, or when the file system cannot lock at all (then held() is false and
  // unsupported() says why); the holder's "HOST PID" when another process holds it. Throws
  // std::runtime_error naming the lock file when it cannot be opened.
  std::optional<std::string> acquire(const std::string& folder);

  // Removes the lock file, then unlocks: a folder left by a finished run holds no lock file.
  void release();

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  const std::string& unsupported() const { return unsupported_; }

 private:
  int fd_ = -1;
  std::string path_, unsupported_;
};

// "host H pid P" for a lock file's "H P"; any other text as it is.
std::string describe_lock_holder(const std::string& holder);

}  // namespace moco::sys
