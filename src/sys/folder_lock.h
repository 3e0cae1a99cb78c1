// defines: FolderLock (one process at a time writes into a folder: an advisory flock(2) on
// FOLDER/moco.lock and FOLDER/.moco.lock, held for the process's life; what moco_dist, moco_lincls and
// moco_pack take on their output folder), lock_holder (whether a live process holds a folder's lock)
#pragma once

#include <optional>
#include <string>

namespace moco::sys {

// The lock file's name inside the folder it guards, and its hidden twin's.
inline constexpr const char* kFolderLockName = "moco.lock";
inline constexpr const char* kFolderGuardName = ".moco.lock";

// An advisory lock on a folder through FOLDER/moco.lock. The kernel drops a flock when its process
// ends, however it ends (kill -9 included): a lock file left behind never blocks anyone, and no
// process ever has to tell whether a holder is still alive. Works where flock(2) works across the
// machines that share the folder: local file systems, NFSv4 (Linux maps flock to NFS locks), Lustre
// mounted with `flock`; with `localflock`, or NFS with `local_lock=all`/`nolock`, only processes of
// one machine see each other's locks.
//
// The same lock is held on a hidden twin, FOLDER/.moco.lock, taken first: `rm moco.lock` (taken for
// a dead run's leftover) under a live holder would let a second process create and lock a new
// moco.lock while the first still writes; the twin still refuses it, before it writes anything, and
// the holder sees (lost()) that its moco.lock is gone.
class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock() { release(); }

  // Takes the lock of `folder` (which must exist) and writes "HOST PID" into the lock files. Returns
  // nullopt once held, or when the file system cannot lock at all (then held() is false and
  // unsupported() says why); the holder's "HOST PID" when another process holds it. Throws
  // std::runtime_error naming the lock file when it cannot be opened.
  std::optional<std::string> acquire(const std::string& folder);

  // Removes the lock files (moco.lock only if it is still the one locked), then unlocks: a folder
  // left by a finished run holds no lock file.
  void release();

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  const std::string& unsupported() const { return unsupported_; }

  // What became of moco.lock since acquire(): nullopt while the file at path() is the one locked
  // (or none is held); else why not, and whether another process holds the file there now (a
  // program that takes moco.lock alone, not its twin), with its "HOST PID".
  struct Loss {
    std::string what;  // "deleted", "replaced by another file", "replaced, and held by host H pid P"
    bool taken = false;
  };
  std::optional<Loss> lost() const;

 private:
  int fd_ = -1, guard_fd_ = -1;
  std::string path_, guard_path_, unsupported_;
};

// "host H pid P" for a lock file's "H P"; any other text as it is.
std::string describe_lock_holder(const std::string& holder);

// The "HOST PID" of a process that holds `folder`'s lock now (moco.lock or its twin), nullopt if none
// does (no lock file, or one a finished or killed process left). Probes with a shared lock dropped at
// once, creating nothing: acquire() waits out such a probe.
std::optional<std::string> lock_holder(const std::string& folder);

}  // namespace moco::sys
