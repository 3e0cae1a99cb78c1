#include "sys/removed_on_signal.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace moco::sys {
namespace {

constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
// The path the handler removes: a fixed buffer, since a handler may not allocate.
char removed_path[4096];

void remove_and_end(int sig) {
  ::unlink(removed_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);  // delivered once this handler returns: the process ends as the signal says
}

}  // namespace

RemovedOnSignal::RemovedOnSignal(const std::string& path) {
  std::strncpy(removed_path, path.c_str(), sizeof(removed_path) - 1);
  struct sigaction action {};
  action.sa_handler = remove_and_end;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) {
    ::sigaction(kSignals[i], nullptr, &before_[i]);
    // A signal this process was started ignoring (nohup, a background job) stays ignored: it ends
    // nothing, so there is nothing to clean up.
    if (before_[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
  }
}

RemovedOnSignal::~RemovedOnSignal() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &before_[i], nullptr);
  removed_path[0] = '\0';
}

std::vector<std::string> remove_stale_temporaries(const std::string& target) {
  namespace fs = std::filesystem;
  const fs::path path(target);
  const fs::path folder = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string prefix = path.filename().string() + ".tmp-";
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const auto name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
      continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    std::error_code gone;
    if (fs::is_regular_file(entry.path(), gone) && fs::remove(entry.path(), gone))
      removed.push_back(entry.path().string());
  }
  return removed;
}

}  // namespace moco::sys
