#include "run/earlier_run.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace moco::run {
namespace {

// What an earlier run leaves in an output folder, each kept aside (as NAME.N) by a fresh start: its
// checkpoints (train.resume=never), metrics, config and TensorBoard events.
const char* const kEarlierRunFiles[] = {"checkpoints", "metrics.jsonl", "config.yaml", "tb"};

// Whether `name` in out_dir holds something of an earlier run: a checkpoints/ folder holding a step
// folder (committed or damaged, not a save's .tmp leftover), a non-empty metrics.jsonl or tb/, any
// config.yaml.
bool holds_earlier_run(const std::filesystem::path& out_dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path path = out_dir / name;
  std::error_code ec;
  if (name == "config.yaml") return fs::exists(path, ec);
  if (name == "metrics.jsonl") return fs::exists(path, ec) && fs::file_size(path, ec) > 0 && !ec;
  if (!fs::is_directory(path, ec)) return false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const auto entry_name = entry.path().filename().string();
    if (name == "tb" || (entry_name.rfind("step_", 0) == 0 && entry.path().extension() != ".tmp")) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return text;
}

// The files of kEarlierRunFiles that hold something (checkpoints/ only when checkpoints_too), as they
// are named in messages (a folder with a '/'), and under `suffix`.
struct EarlierRunFiles {
  std::vector<std::string> names, kept, kept_as;
};
EarlierRunFiles earlier_run_files(const std::filesystem::path& out_dir, bool checkpoints_too) {
  EarlierRunFiles files;
  const std::string suffix = "." + std::to_string(next_free_suffix(out_dir.string()));
  for (const std::string name : kEarlierRunFiles) {
    if ((name == "checkpoints" && !checkpoints_too) || !holds_earlier_run(out_dir, name)) continue;
    const std::string slash = name == "checkpoints" || name == "tb" ? "/" : "";
    files.names.push_back(name);
    files.kept.push_back(name + slash);
    files.kept_as.push_back(name + suffix + slash);
  }
  return files;
}

}  // namespace

// A fresh start (nothing to resume, or train.resume=never) where an earlier run left its files: that
// run failed before its first checkpoint, its checkpoints were deleted, or it is set aside on purpose.
// Its files are what is left to tell what it did; they are kept under one suffix, the first free for
// all of them, never truncated, overwritten or mixed with this run's (a tb/ shared by two runs
// overlays them in TensorBoard; checkpoints of the earlier run would be resumed or deleted by this one).
void keep_earlier_run_files(const std::string& output_dir, bool checkpoints_too, bool dry_run) {
  const std::filesystem::path out_dir(output_dir);
  const auto files = earlier_run_files(out_dir, checkpoints_too);
  if (files.names.empty()) return;
  const auto what = fmt::format("the earlier {} {} kept as {}", joined(files.kept),
                                files.kept.size() > 1 ? "are" : "is", joined(files.kept_as));
  if (dry_run) {
    spdlog::info("  train.output_dir: a fresh start; {}", what);
    return;
  }
  for (size_t i = 0; i < files.names.size(); ++i)  // a failure names both paths
    std::filesystem::rename(out_dir / files.names[i], out_dir / files.kept_as[i].substr(0, files.kept_as[i].find('/')));
  spdlog::warn("train.output_dir '{}' holds an earlier run's {}{}: {}this run starts afresh; {}", out_dir.string(),
               joined(files.kept), checkpoints_too ? "" : " and no checkpoint to resume",
               checkpoints_too ? "train.resume=never, so " : "", what);
}

int next_free_suffix(const std::string& out_dir) {
  std::error_code ec;
  const auto taken = [&](int n) {
    for (const std::string name : kEarlierRunFiles)
      if (std::filesystem::exists(std::filesystem::path(out_dir) / (name + "." + std::to_string(n)), ec)) return true;
    return false;
  };
  int n = 1;
  while (taken(n)) ++n;
  return n;
}

}  // namespace moco::run
