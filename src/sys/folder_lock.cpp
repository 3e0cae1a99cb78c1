#include "sys/folder_lock.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace moco::sys {
namespace {

// "HOST PID" as the holder wrote it. A holder that has just locked may not have written it yet:
// read again for up to a second.
std::string read_holder(int fd) {
  for (int attempt = 0; attempt < 40; ++attempt) {
    char text[512] = {};
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    std::string holder(text, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (!holder.empty()) return holder;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return "a process that has not written its host and pid";
}

std::string host_and_pid() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "(unknown host)");
  return std::string(host) + " " + std::to_string(::getpid()) + "\n";
}

// The file the descriptor locked is still the one at `path`: a holder's release removes the file
// before it unlocks, so a lock won on the removed file guards nothing.
bool still_at_path(int fd, const std::string& path) {
  struct stat by_fd {
  }, by_path{};
  return ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 && by_fd.st_dev == by_path.st_dev &&
         by_fd.st_ino == by_path.st_ino;
}

std::string link_target(const std::string& path) {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(path, ec);
  return ec ? "?" : target.string();
}

// flock without waiting, 0 or the errno; a conflict is tried again for 0.2 s, past the moment
// lock_holder's probe holds its shared lock.
int lock_now(int fd, int operation) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, operation | LOCK_NB) == 0) return 0;
    const int error = errno;
    if (error != EWOULDBLOCK || attempt == 10) return error;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Locks the file at `path` (created if missing) into `fd`: nullopt once held, or when the file system
// cannot lock (`unsupported` says why, `fd` stays -1); the holder's "HOST PID" when another holds it.
std::optional<std::string> lock_file(const std::string& path, int& fd, std::string& unsupported) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    // Never through a link: the run would write its host and pid into whatever the link names.
    const int opened = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (opened < 0 && errno == ELOOP)
      throw std::runtime_error(path + ": the lock file is a symbolic link (to " + link_target(path) +
                               "); a run never writes through one: remove the link");
    if (opened < 0) throw std::runtime_error(path + ": cannot open the lock file: " + std::strerror(errno));
    if (const int error = lock_now(opened, LOCK_EX); error != 0) {
      if (error == EWOULDBLOCK) {
        auto holder = read_holder(opened);
        ::close(opened);
        return holder;
      }
      ::close(opened);
      // No locks on this file system (NFS without a lock daemon, Lustre without `flock`).
      if (error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP || error == EINVAL) {
        unsupported = path + ": the file system cannot lock it: " + std::strerror(error);
        return std::nullopt;
      }
      throw std::runtime_error(path + ": cannot lock: " + std::strerror(error));
    }
    if (!still_at_path(opened, path)) {
      ::close(opened);
      continue;
    }
    // The lock is the flock; the holder's name is a courtesy to a second run. On a full disk the run
    // keeps the lock and fails where it must write, naming that file.
    const auto text = host_and_pid();
    if (::ftruncate(opened, 0) != 0 ||
        ::pwrite(opened, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      spdlog::warn("{}: locked, but cannot write this run's host and pid into it: {}", path, std::strerror(errno));
    fd = opened;
    return std::nullopt;
  }
  throw std::runtime_error(path + ": cannot lock: the file keeps being replaced");
}

// The "HOST PID" of a process holding the lock file at `path`, nullopt if none does or there is none.
std::optional<std::string> holder_of(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) holder = read_holder(fd);
  ::close(fd);  // drops the probe's shared lock, if it got one
  return holder;
}

// Removes the lock file if it is still the one `fd` locked (never another process's), then unlocks.
void unlock_file(int& fd, const std::string& path) {
  if (fd < 0) return;
  if (still_at_path(fd, path)) ::unlink(path.c_str());
  ::close(fd);
  fd = -1;
}

std::string in_folder(const std::string& folder, const char* name) {
  return folder + (folder.empty() || folder.back() == '/' ? "" : "/") + name;
}

}  // namespace

std::optional<std::string> FolderLock::acquire(const std::string& folder) {
  release();
  path_ = in_folder(folder, kFolderLockName);
  guard_path_ = in_folder(folder, kFolderGuardName);
  // The twin first: a live holder whose moco.lock was deleted still holds it, and moco.lock is never
  // touched while another holds the folder.
  if (auto holder = lock_file(guard_path_, guard_fd_, unsupported_)) return holder;
  if (guard_fd_ < 0) return std::nullopt;  // the file system cannot lock (unsupported_)
  auto holder = lock_file(path_, fd_, unsupported_);
  if (holder || fd_ < 0) release();
  return holder;
}

std::optional<FolderLock::Loss> FolderLock::lost() const {
  if (fd_ < 0 || still_at_path(fd_, path_)) return std::nullopt;
  struct stat by_path {};
  if (::stat(path_.c_str(), &by_path) != 0) return Loss{"deleted", false};
  if (const auto holder = holder_of(path_)) return Loss{"replaced, and held by " + describe_lock_holder(*holder), true};
  return Loss{"replaced by another file", false};
}

std::string describe_lock_holder(const std::string& holder) {
  const auto space = holder.rfind(' ');
  if (space == std::string::npos || space + 1 == holder.size() ||
      holder.find_first_not_of("0123456789", space + 1) != std::string::npos)
    return holder;
  return "host " + holder.substr(0, space) + " pid " + holder.substr(space + 1);
}

void FolderLock::release() {
  unlock_file(fd_, path_);
  unlock_file(guard_fd_, guard_path_);
}

std::optional<std::string> lock_holder(const std::string& folder) {
  if (auto holder = holder_of(in_folder(folder, kFolderGuardName))) return holder;
  return holder_of(in_folder(folder, kFolderLockName));
}

}  // namespace moco::sys
