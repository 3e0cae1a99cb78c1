// defines: scratch_path (a per-process temporary file or folder the readers under test open by
// name), write_file, fuzz_bug (a broken promise: reported as a crash, with the input saved)
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace moco::fuzz {

// A fresh name under /tmp, made once per process and removed at exit. folder: a directory.
inline std::string scratch_path(const char* tag, bool folder = false) {
  std::string name = std::string("/tmp/moco_fuzz_") + tag + "_XXXXXX";
  if (folder) {
    if (mkdtemp(name.data()) == nullptr) std::abort();
  } else {
    const int fd = mkstemp(name.data());
    if (fd < 0) std::abort();
    close(fd);
  }
  return name;
}

// Removes what scratch_path made when the process ends (libFuzzer exits through exit()).
class ScratchGuard {
 public:
  explicit ScratchGuard(std::string path) : path_(std::move(path)) {}
  ~ScratchGuard() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
}

[[noreturn]] inline void fuzz_bug(const std::string& what) {
  std::fprintf(stderr, "fuzz: broken promise: %s\n", what.c_str());
  std::abort();
}

}  // namespace moco::fuzz
