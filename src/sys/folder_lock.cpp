#include "sys/folder_lock.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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

}  // namespace

std::optional<std::string> FolderLock::acquire(const std::string& folder) {
  release();
  path_ = folder + (folder.empty() || folder.back() == '/' ? "" : "/") + kFolderLockName;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(path_ + ": cannot open the lock file: " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      if (error == EWOULDBLOCK) {
        auto holder = read_holder(fd);
        ::close(fd);
        return holder;
      }
      ::close(fd);
      // No locks on this file system (NFS without a lock daemon, Lustre without `flock`).
      if (error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP || error == EINVAL) {
        unsupported_ = path_ + ": the file system cannot lock it: " + std::strerror(error);
        return std::nullopt;
      }
      throw std::runtime_error(path_ + ": cannot lock: " + std::strerror(error));
    }
    if (!still_at_path(fd, path_)) {
      ::close(fd);
      continue;
    }
    // The lock is the flock; the holder's name is a courtesy to a second run. On a full disk the run
    // keeps the lock and fails where it must write, naming that file.
    const auto text = host_and_pid();
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      spdlog::warn("{}: locked, but cannot write this run's host and pid into it: {}", path_, std::strerror(errno));
    fd_ = fd;
    return std::nullopt;
  }
  throw std::runtime_error(path_ + ": cannot lock: the file keeps being replaced");
}

std::string describe_lock_holder(const std::string& holder) {
  const auto space = holder.rfind(' ');
  if (space == std::string::npos || space + 1 == holder.size() ||
      holder.find_first_not_of("0123456789", space + 1) != std::string::npos)
    return holder;
  return "host " + holder.substr(0, space) + " pid " + holder.substr(space + 1);
}

void FolderLock::release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace moco::sys
