#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace moco::sys {

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(path + ": cannot sync: " + why);
  }
  ::close(fd);
}

void write_synced(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::trunc);
    errno = 0;
    out << text;
    out.flush();
    // The stream keeps no error code; the failed write(2) left its errno.
    if (!out)
      throw std::runtime_error(path + ": cannot write" + (errno ? std::string(": ") + std::strerror(errno) : ""));
  }
  fsync_path(path);
}

void replace_synced(const std::string& path, const std::string& tmp, const std::string& text) {
  try {
    write_synced(tmp, text);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw std::runtime_error(path + ": cannot replace: " + ec.message());
  } catch (...) {
    std::error_code ignored;  // no temporary file left: `path` keeps what it held, whole
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace moco::sys
