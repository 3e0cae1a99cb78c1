#include "run/run_output.h"

#include "run/run_logging.h"

#include "dist/bootstrap.h"

#include <unistd.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace moco::run {
namespace {

// The output folder can be created and written, checked without creating it.
void check_output_dir_writable(const std::filesystem::path& dir) {
  auto existing = std::filesystem::absolute(dir);
  while (!std::filesystem::exists(existing) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (!std::filesystem::is_directory(existing) || access(existing.c_str(), W_OK) != 0)
    throw std::runtime_error(
        fmt::format("train.output_dir {}: cannot be created or written ({} is not a writable folder)", dir.string(),
                    existing.string()));
}

void write_config_yaml(const Config& config, const std::filesystem::path& out_dir) {
  std::ofstream config_out(out_dir / "config.yaml");
  config_out << to_yaml(config);
  config_out.flush();
  if (!config_out)
    throw std::runtime_error("train.output_dir '" + out_dir.string() + "': cannot write config.yaml in it");
}

// A fresh start (nothing to resume) where an earlier run left its metrics: that run failed before
// its first checkpoint, or its checkpoints were deleted. Its metrics.jsonl and config.yaml are what
// is left to tell what it did; they are kept under the first free suffix, never truncated.
void keep_earlier_run_files(const std::filesystem::path& out_dir) {
  namespace fs = std::filesystem;
  const fs::path metrics = out_dir / "metrics.jsonl", config = out_dir / "config.yaml";
  std::error_code ec;
  const auto size = fs::file_size(metrics, ec);
  if (ec || size == 0) return;
  int n = 1;
  const auto taken = [&](int i) {
    return fs::exists(metrics.string() + "." + std::to_string(i), ec) ||
           fs::exists(config.string() + "." + std::to_string(i), ec);
  };
  while (taken(n)) ++n;
  const std::string suffix = "." + std::to_string(n);
  fs::rename(metrics, metrics.string() + suffix);  // a failure names both paths
  if (fs::exists(config, ec)) fs::rename(config, config.string() + suffix);
  spdlog::warn(
      "train.output_dir '{}' holds an earlier run's metrics.jsonl and no checkpoint to resume: this run "
      "starts afresh; the earlier metrics.jsonl and config.yaml are kept as metrics.jsonl{} and config.yaml{}",
      out_dir.string(), suffix, suffix);
}

}  // namespace

void lock_output_dir(const std::string& output_dir, const std::string& key, int rank, sys::FolderLock& lock) {
  std::string holder;
  if (rank == 0) {
    try {
      make_output_dir(output_dir);
      holder = lock.acquire(output_dir).value_or("");
      if (!lock.unsupported().empty())
        spdlog::warn("{}; a second run in {} would not be noticed", lock.unsupported(), output_dir);
    } catch (const std::exception& e) {
      holder = std::string("\n") + e.what();  // cannot lock: every rank fails alike, naming why
    }
  }
  holder = dist::broadcast_from_rank0(holder);
  if (holder.empty()) return;
  if (holder.front() == '\n') throw std::runtime_error(holder.substr(1));  // it names the folder or the lock file
  throw FolderInUse(fmt::format(
      "{} '{}' is in use by another run: {} holds its lock {}; two runs in one folder would delete each other's "
      "checkpoints: wait for it to end, or choose another {}",
      key, output_dir, sys::describe_lock_holder(holder),
      (std::filesystem::path(output_dir) / sys::kFolderLockName).string(), key));
}

std::optional<metrics::MetricsLog> open_run_output(const Config& config, int rank, bool append, bool dry_run) {
  const std::filesystem::path out_dir(config.train.output_dir);
  if (dry_run) {
    check_output_dir_writable(out_dir);
    return std::nullopt;
  }
  make_output_dir(out_dir.string());
  if (rank != 0) return std::nullopt;
  if (!append) keep_earlier_run_files(out_dir);
  write_config_yaml(config, out_dir);
  return std::optional<metrics::MetricsLog>(std::in_place, (out_dir / "metrics.jsonl").string(), append,
                                            config.train.tensorboard ? (out_dir / "tb").string() : std::string());
}

}  // namespace moco::run
