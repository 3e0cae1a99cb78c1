#include "run/checkpointing.h"

#include "run/earlier_run.h"
#include "run/later_steps.h"
#include "run/resume_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace moco::run {
namespace fs = std::filesystem;

namespace {

// Rank 0's text, on every rank of `group`.
std::string agreed_text(std::string text, dist::ProcessGroup& group) {
  if (group.world_size() == 1) return text;
  auto size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  group.broadcast(size, 0);
  auto bytes = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
  if (group.rank() == 0) std::memcpy(bytes.data_ptr<uint8_t>(), text.data(), text.size());
  if (bytes.numel() > 0) group.broadcast(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
}

// Rank 0's committed checkpoint folders under root, newest first, on every rank.
std::vector<std::string> agreed_candidates(const std::string& root, dist::ProcessGroup& group) {
  std::string listing;
  if (group.rank() == 0)
    for (const auto& folder : ckpt::committed_step_folders(root)) listing = folder.path + "\n" + listing;
  std::vector<std::string> folders;
  std::istringstream lines(agreed_text(listing, group));
  for (std::string line; std::getline(lines, line);) folders.push_back(line);
  return folders;
}

// train.resume naming a checkpoint that does not load.
std::string does_not_load(const std::string& dir, const std::string& why) {
  return fmt::format(
      "train.resume: '{}' does not load: {}\n(`moco_ckpt verify {}` names what is damaged; name another "
      "checkpoint, or train.resume=auto)",
      dir, why, dir);
}

}  // namespace

Checkpointing::Checkpointing(const Config& config, dist::ProcessGroup& group, Job job)
    : config_(config), group_(group), job_(job), root_((fs::path(config.train.output_dir) / "checkpoints").string()) {
  if (config.ckpt.async)
    async_ = std::make_unique<ckpt::AsyncSaver>(
        group, [this](int64_t step) { apply_retention(step); },
        std::chrono::seconds(static_cast<int64_t>(std::max(600.0, config.dist.timeout_s))));
  const std::string& resume = config.train.resume;
  // A fresh start: open_run_output keeps the checkpoints already here aside (checkpoints.N/).
  if (resume == "never") return;
  if (resume == "auto") {
    candidates_ = agreed_candidates(root_, group);
  } else {
    if (!fs::exists(fs::path(resume) / ckpt::kManifestFile))
      throw ConfigError(fmt::format("train.resume: '{}' is not a committed checkpoint folder (no {} in it)", resume,
                                    ckpt::kManifestFile));
    candidates_.push_back(resume);
  }
  choose_candidate();
}

// Before any data is loaded or anything written: the newest candidate that loads (its config checked,
// every tensor read against its checksums) becomes the first, those before it are remembered with why
// (resume() warns of them). Checkpoints of which none loads are refused: a fresh start used to
// overwrite them step by step and append its rows to their metrics.jsonl.
void Checkpointing::choose_candidate() {
  while (!candidates_.empty()) {
    const std::string dir = candidates_.front();
    try {
      candidate_step_ = check_candidate(dir);
      return;
    } catch (const ckpt::CheckpointError& e) {
      // The key's fault, as a missing path is: exit 2, nothing left behind.
      if (config_.train.resume != "auto") throw ConfigError(does_not_load(dir, e.what()));
      skipped_.push_back({dir, e.what()});
      candidates_.erase(candidates_.begin());
    }
  }
  if (!skipped_.empty()) throw ConfigError(none_loads());
}

int64_t Checkpointing::check_candidate(const std::string& dir) const {
  std::string error;
  ckpt::Manifest manifest;
  try {
    manifest = ckpt::read_manifest(dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ckpt::agree_no_errors(error, group_);  // every rank goes on, or none
  check_config(manifest, dir, false);
  ckpt::verify_checkpoint(dir, group_);
  return manifest.step;
}

void Checkpointing::keep_later_steps_aside(bool dry_run) const {
  if (group_.rank() != 0 || candidates_.empty()) return;
  run::keep_later_steps_aside(config_.train.output_dir, candidate_step_, config_.train.resume == "auto", dry_run);
}

std::string Checkpointing::none_loads() const {
  std::string each;
  for (const auto& [dir, why] : skipped_) each += fmt::format("\n  {}: {}", dir, why);
  const auto out = config_.train.output_dir;
  const int n = next_free_suffix(out);
  return fmt::format(
      "train.output_dir '{}': none of its {} checkpoint(s) can be loaded, and a fresh start would overwrite them:{}\n"
      "Ways on: `moco_ckpt verify CHECKPOINT` names what is damaged in each (`moco_ckpt export` may still take an "
      "encoder from one); train.resume=never starts afresh here, keeping them as {}/checkpoints.{}/ (and "
      "metrics.jsonl, config.yaml and tb/ as .{}: nothing is deleted); or another train.output_dir starts afresh "
      "elsewhere",
      out, skipped_.size(), each, out, n, n);
}

void Checkpointing::check_config(const ckpt::Manifest& manifest, const std::string& dir,
                                 bool log_allowed_changes) const {
  const Config saved =
      load_config_text(config_.methods, manifest.config_yaml, dir + "/" + ckpt::kManifestFile + " (the saved config)");
  if (global_batch(saved, job_) != global_batch(config_, job_))
    throw ConfigError(
        fmt::format("{} was trained with a global batch of {} ({}), this run has {}: a resumed "
                    "run needs the same global batch (any number of ranks that divides it will do)",
                    dir, global_batch(saved, job_), global_batch_key(job_), global_batch(config_, job_)));
  std::string math;
  // Where the train split lies is not what it holds: the fingerprint (checked below) proves the files
  // the same at another data.root (a new disk, another cluster). Without one, a move is refused.
  const bool fingerprinted = manifest.notes.count(kTrainDataNote) > 0;
  const auto moved_only = [&](const ConfigChange& change) {
    return fingerprinted && (change.key == "data.root" || change.key == "data.train_dir");
  };
  for (const auto& change : config_changes(saved, config_, job_)) {
    if (change.changes_math && !moved_only(change)) {
      math += fmt::format("\n  {}: {} in the checkpoint, {} now", change.key, change.before, change.after);
    } else if (log_allowed_changes) {
      spdlog::info("resume: {} changes from {} to {}", change.key, change.before, change.after);
    }
  }
  if (!math.empty())
    throw ConfigError(
        fmt::format("{}: cannot resume, the config differs in keys that change the computation:{}\n"
                    "(restore them, or start a new run in another train.output_dir)",
                    dir, math));
  check_resume_data(config_, manifest, dir, log_allowed_changes);
}

std::optional<std::string> Checkpointing::resume(const std::vector<ckpt::StateEntry>& state) {
  for (const auto& [dir, why] : skipped_) spdlog::warn("resume: skipping {}: {}", dir, why);
  for (const auto& dir : candidates_) {
    try {
      const auto start = std::chrono::steady_clock::now();
      check_config(ckpt::read_manifest(dir), dir, true);
      const auto manifest = ckpt::load_checkpoint(dir, state, group_);
      spdlog::info("resumed from {} (step {}, written by {} rank(s), {:.1f} MiB) in {:.2f}s", dir, manifest.step,
                   manifest.world_size, manifest.total_bytes() / 1048576.0,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (manifest.world_size != group_.world_size())
        spdlog::info("resume: the checkpoint was written by {} rank(s), this run has {}", manifest.world_size,
                     group_.world_size());
      return dir;
    } catch (const ckpt::CheckpointError& e) {
      if (config_.train.resume != "auto") throw;
      spdlog::warn("resume: skipping {}: {}", dir, e.what());
      skipped_.push_back({dir, e.what()});
    }
  }
  // Verified, yet none loads into this run's state (another model's tensors): refused all the same.
  if (!candidates_.empty()) throw ConfigError(none_loads());
  return std::nullopt;
}

std::optional<std::string> Checkpointing::would_resume_from(std::vector<std::string>& skipped) const {
  for (const auto& [dir, why] : skipped_) skipped.push_back(dir + ": " + why);
  if (candidates_.empty()) return std::nullopt;
  // What the run would log of it: the keys that change, a change of the data it goes on with.
  check_config(ckpt::read_manifest(candidates_.front()), candidates_.front(), true);
  return candidates_.front();
}

bool Checkpointing::due(int64_t step, double train_seconds) const {
  if (config_.ckpt.every_steps > 0 && step % config_.ckpt.every_steps == 0) return true;
  return config_.ckpt.every_minutes > 0 && train_seconds - last_saved_seconds_ >= config_.ckpt.every_minutes * 60;
}

SavedCheckpoint Checkpointing::save(const std::vector<ckpt::StateEntry>& state, int64_t step, double epoch,
                                    double train_seconds) {
  const auto start = std::chrono::steady_clock::now();
  ckpt::SaveInfo info;
  info.step = step;
  info.epoch = epoch;
  info.global_batch = global_batch(config_, job_);
  info.config_yaml = to_yaml(config_);
  if (!notes_.count(kTrainDataNote)) notes_[kTrainDataNote] = train_data_note(config_);
  info.notes = notes_;
  SavedCheckpoint saved;
  if (async_) {
    saved.path = async_->save(root_, state, info);
  } else {
    saved.path = ckpt::save_checkpoint(root_, state, info, group_);
    if (group_.rank() == 0) apply_retention(step);
  }
  for (const auto& e : state)
    saved.bytes +=
        e.tensor.numel() * static_cast<int64_t>(e.tensor.element_size()) * (e.rank_local ? group_.world_size() : 1);
  saved.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  last_saved_step_ = step;
  last_saved_seconds_ = train_seconds;
  spdlog::info("checkpoint {} ({:.1f} MiB, {:.2f}s{})", saved.path, saved.bytes / 1048576.0, saved.seconds,
               async_ ? " blocked, the rest in the background" : "");
  return saved;
}

void Checkpointing::finish() {
  if (async_) async_->wait();
}

void Checkpointing::apply_retention(int64_t protect) const {
  ckpt::RetentionPolicy policy;
  policy.keep_last = config_.ckpt.keep_last;
  policy.keep_every_steps = config_.ckpt.keep_every_steps;
  for (const auto& gone : ckpt::apply_retention(root_, policy, protect))
    spdlog::info("checkpoint retention: deleted {}", gone);
}

}  // namespace moco::run
