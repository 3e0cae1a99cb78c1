#include "run/run_output.h"

#include "run/checkpointing.h"
#include "run/earlier_run.h"
#include "run/run_logging.h"

#include "ckpt/checkpoint_dir.h"
#include "dist/bootstrap.h"
#include "preempt/preemption.h"

#include <unistd.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

// A checkpoints root a run keeps: its `latest`, or a committed step.
bool holds_checkpoints(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "latest", ec) || !ckpt::committed_steps(dir.string()).empty();
}

// Why a run may not write into output_dir, or "": it lies inside another run's checkpoints/, whose
// retention deletes what it does not keep there, a folder whole (this run's log, metrics and
// checkpoints with it); or inside the folder of a running run (one holding its lock), whose files
// and this run's would mix. The folder itself being held is lock_output_dir's to say.
std::string misplaced(const std::string& output_dir, const std::string& key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(output_dir, ec), ec);
  if (dir.filename().empty()) dir = dir.parent_path();  // ".../a/"
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    if (p.filename() == "checkpoints" && holds_checkpoints(p))
      return fmt::format(
          "{} '{}' lies inside {}, another run's checkpoints folder: its retention (ckpt.keep_last) deletes what it "
          "does not keep there, a folder whole; write it elsewhere",
          key, output_dir, p.string());
    if (p != dir)
      if (const auto holder = sys::lock_holder(p.string()))
        return fmt::format(
            "{} '{}' lies inside {}, the folder of a running run ({} holds its lock {}): the two runs' files would "
            "mix; write it elsewhere",
            key, output_dir, p.string(), sys::describe_lock_holder(*holder), (p / sys::kFolderLockName).string());
    if (p == p.parent_path()) break;
  }
  return "";
}

// Rank 0's verdict on every rank: ConfigError, before anything is made or written. Collective.
void refuse_misplaced(const std::string& output_dir, const std::string& key, int rank) {
  const auto why = dist::broadcast_from_rank0(rank == 0 ? misplaced(output_dir, key) : std::string());
  if (!why.empty()) throw ConfigError(why);
}

// After every step (check_log_writes, rank 0): the lock file deleted under the run (taken for a dead
// run's leftover) stops it with a checkpoint, as SIGUSR1 would, once; its hidden twin still keeps any
// other run out meanwhile. A lock file another process holds now (one that takes moco.lock alone)
// stops it at once: the folder is that process's now, and a checkpoint would be written beside it.
void watch_lock(const sys::FolderLock& lock, const std::string& output_dir, const std::string& key) {
  set_output_check([&lock, output_dir, key, said = false]() mutable {
    const auto loss = lock.lost();
    if (!loss) return;
    if (loss->taken)
      throw std::runtime_error(fmt::format(
          "{} '{}': its lock {} was {} while this run writes there: another run holds the folder now; this run "
          "stops without another checkpoint (the last committed one stays), as two runs in one folder delete each "
          "other's checkpoints",
          key, output_dir, lock.path(), loss->what));
    if (std::exchange(said, true)) return;
    spdlog::warn(
        "{} '{}': its lock {} was {} while this run writes there (no other run can start there meanwhile: the run "
        "still holds {}/{}); the run stops after this step with a checkpoint, as for SIGUSR1: the same command "
        "continues from it",
        key, output_dir, lock.path(), loss->what, output_dir, sys::kFolderGuardName);
    preempt::request_stop(SIGUSR1);
  });
}

}  // namespace

void lock_output_dir(const std::string& output_dir, const std::string& key, int rank, sys::FolderLock& lock) {
  refuse_misplaced(output_dir, key, rank);
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
  if (holder.empty()) {
    if (lock.held()) watch_lock(lock, output_dir, key);
    return;
  }
  if (holder.front() == '\n') throw std::runtime_error(holder.substr(1));  // it names the folder or the lock file
  const auto lock_file = (std::filesystem::path(output_dir) / sys::kFolderLockName).string();
  std::error_code ec;
  const bool deleted = !std::filesystem::exists(lock_file, ec);  // held through its twin alone
  throw FolderInUse(fmt::format(
      "{} '{}' is in use by another run: {} holds its lock {}{}; two runs in one folder would delete each other's "
      "checkpoints: wait for it to end, or choose another {}",
      key, output_dir, sys::describe_lock_holder(holder), lock_file,
      deleted
          ? fmt::format(" (the file was deleted; the run still holds {}, and stops after its step with a checkpoint)",
                        sys::kFolderGuardName)
          : "",
      key));
}

std::optional<metrics::MetricsLog> open_run_output(const Config& config, int rank, const Checkpointing& checkpointing,
                                                   bool dry_run) {
  const std::filesystem::path out_dir(config.train.output_dir);
  const bool never = config.train.resume == "never";
  const bool append = checkpointing.will_try_resume();
  if (dry_run) {
    refuse_misplaced(out_dir.string(), "train.output_dir", rank);
    check_output_dir_writable(out_dir);
    if (rank == 0 && !append) keep_earlier_run_files(out_dir.string(), never, /*dry_run=*/true);
    checkpointing.keep_later_steps_aside(/*dry_run=*/true);
    return std::nullopt;
  }
  make_output_dir(out_dir.string());
  if (rank != 0) return std::nullopt;
  if (!append) keep_earlier_run_files(out_dir.string(), never, /*dry_run=*/false);
  checkpointing.keep_later_steps_aside(/*dry_run=*/false);
  write_config_yaml(config, out_dir);
  return std::optional<metrics::MetricsLog>(std::in_place, (out_dir / "metrics.jsonl").string(), append,
                                            config.train.tensorboard ? (out_dir / "tb").string() : std::string());
}

}  // namespace moco::run
