#include "run/run_logging.h"

#include <spdlog/details/file_helper.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>

namespace moco::run {
namespace {

// A rank's log file, each line from info up written through before the console gets it: a rank
// killed just after logging (another rank's MPI_Abort takes every process down) keeps in its file
// whatever it showed on the console, whose pipe write can hand the core to the launcher mid-line.
class WrittenThroughFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit WrittenThroughFileSink(const std::string& path) { file_.open(path, /*truncate=*/false); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    file_.write(line);
    if (msg.level >= spdlog::level::info) file_.flush();
  }
  void flush_() override { file_.flush(); }

 private:
  spdlog::details::file_helper file_;
};

// The first failed write to the log file (spdlog's text: "Failed flush to file F: No space left on
// device"), empty while none failed. Set from whichever thread logged.
std::mutex log_failure_mutex;
std::string log_failure;
std::atomic<bool> log_failed{false};

void note_log_failure(const std::string& file, const std::string& what) {
  {
    const std::lock_guard<std::mutex> lock(log_failure_mutex);
    if (!log_failure.empty()) return;
    log_failure = file + ": cannot write the log: " + what;
    std::fprintf(stderr, "[error] %s; the run stops\n", log_failure.c_str());
  }
  log_failed.store(true);
}

std::filesystem::path rank_log_file(const std::string& output_dir, int rank) {
  return std::filesystem::path(output_dir) / ("rank" + std::to_string(rank) + ".log");
}

// A path and the file it named when the run opened it (device and inode). A folder deleted (or
// moved, or replaced) under a running run takes its log, metrics and config with it while every
// write to the open files still succeeds: the run would finish "fine" into files no one can read.
struct Watched {
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  bool same_file() const {
    struct stat now {};
    return ::stat(path.c_str(), &now) == 0 && now.st_dev == dev && now.st_ino == ino;
  }
};
std::mutex watched_mutex;
std::optional<Watched> watched_dir, watched_log;
std::function<void()> output_check;  // set_output_check's

std::optional<Watched> watch(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return Watched{path, st.st_dev, st.st_ino};
}

// Throws std::runtime_error naming the folder (or the log file) once it is not the one the run opened.
void check_output_still_there() {
  const std::lock_guard<std::mutex> lock(watched_mutex);
  if (watched_dir && !watched_dir->same_file())
    throw std::runtime_error("train.output_dir '" + watched_dir->path +
                             "': deleted, moved or replaced while the run writes into it (its log, metrics and "
                             "checkpoints would be lost); the run stops");
  // (rm -r takes the files before their folder: a check in between finds the log gone first.)
  if (watched_log && !watched_log->same_file())
    throw std::runtime_error("train.output_dir '" + (watched_dir ? watched_dir->path : std::string("?")) + "': its " +
                             watched_log->path +
                             " was deleted or replaced while the run writes into it; the run stops");
}

}  // namespace

void set_output_check(std::function<void()> check) {
  const std::lock_guard<std::mutex> lock(watched_mutex);
  output_check = std::move(check);
}

void check_log_writes() {
  check_output_still_there();
  {
    const std::lock_guard<std::mutex> lock(watched_mutex);
    if (output_check) output_check();  // in place: it keeps what it has said
  }
  if (!log_failed.load()) return;
  const std::lock_guard<std::mutex> lock(log_failure_mutex);
  throw std::runtime_error(log_failure);
}

void make_output_dir(const std::string& output_dir) {
  std::error_code ec;
  if (std::filesystem::exists(output_dir, ec) && !std::filesystem::is_directory(output_dir, ec))
    throw std::runtime_error("train.output_dir '" + output_dir + "': exists and is not a folder");
  std::filesystem::create_directories(output_dir, ec);
  if (ec) {
    throw std::runtime_error("train.output_dir '" + output_dir + "': cannot create the folder (" + ec.message() + ")");
  }
}

void setup_logging(const std::string& output_dir, int rank, int world_size, bool all_ranks_to_console, bool to_files) {
  if (to_files) make_output_dir(output_dir);
  std::vector<spdlog::sink_ptr> sinks;
  // Appended to: a resumed or requeued run keeps the log of the attempts before it. First, so that
  // a line reaches the file before the console.
  const auto file = rank_log_file(output_dir, rank);
  if (to_files) {
    try {
      sinks.push_back(std::make_shared<WrittenThroughFileSink>(file.string()));
    } catch (const spdlog::spdlog_ex& e) {
      throw std::runtime_error("train.output_dir '" + output_dir + "': cannot write " + file.string() + " in it (" +
                               e.what() + ")");
    }
  }
  if (to_files) {
    const std::lock_guard<std::mutex> lock(watched_mutex);
    watched_dir = watch(output_dir);
    watched_log = watch(file.string());
  }
  if (rank == 0 || all_ranks_to_console) sinks.push_back(std::make_shared<spdlog::sinks::stdout_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>("moco_dist", sinks.begin(), sinks.end());
  logger->set_pattern(world_size > 1 ? "[%Y-%m-%d %H:%M:%S.%e] [%l] [rank " + std::to_string(rank) + "] %v"
                                     : "[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  logger->flush_on(spdlog::level::info);
  // Not spdlog's own handler, which prints and goes on: a run that lost its log stops (check_log_writes).
  logger->set_error_handler([file = file.string()](const std::string& what) { note_log_failure(file, what); });
  spdlog::set_default_logger(logger);
}

LogUndo::LogUndo(const std::string& output_dir, int rank)
    : dir_(output_dir), file_(rank_log_file(output_dir, rank).string()), rank_(rank) {
  std::error_code ec;
  dir_existed_ = std::filesystem::exists(dir_, ec);
  file_existed_ = std::filesystem::is_regular_file(file_, ec);
  if (file_existed_) file_size_ = std::filesystem::file_size(file_, ec);
}

void LogUndo::undo() const {
  {
    const std::lock_guard<std::mutex> lock(watched_mutex);
    watched_dir.reset();  // removed on purpose below
    watched_log.reset();
    output_check = nullptr;
  }
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove_if(sinks.begin(), sinks.end(),
                             [](const spdlog::sink_ptr& s) { return dynamic_cast<WrittenThroughFileSink*>(s.get()); }),
              sinks.end());
  std::error_code ec;
  if (!dir_existed_) {
    // Made by this run: every rank's log in it is this run's. Anything else (a checkpoint) keeps
    // the folder.
    std::filesystem::remove(file_, ec);
    if (rank_ != 0) return;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      const auto name = entry.path().filename().string();
      if (name.rfind("rank", 0) == 0 && entry.path().extension() == ".log") std::filesystem::remove(entry.path(), ec);
    }
    std::filesystem::remove(dir_, ec);  // only if empty now
  } else if (!file_existed_) {
    std::filesystem::remove(file_, ec);
  } else {
    std::filesystem::resize_file(file_, file_size_, ec);
  }
}

}  // namespace moco::run
