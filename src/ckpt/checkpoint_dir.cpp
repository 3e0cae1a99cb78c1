#include "ckpt/checkpoint_dir.h"

#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "sys/durable_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <tuple>

namespace moco::ckpt {
namespace fs = std::filesystem;

namespace {
// At most 18 digits: every such step fits int64_t. A longer one (step_99999999999999999999, made by
// hand) is no run's folder: listed, resumed and removed by none (it stopped every start with stoll).
const std::regex& step_pattern() {
  static const std::regex pattern(R"(step_(\d{8,18})(\.tmp)?)");
  return pattern;
}
}  // namespace

std::string step_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

std::string step_dir(const std::string& root, int64_t step) { return (fs::path(root) / step_dir_name(step)).string(); }

std::vector<StepFolder> step_folders(const std::string& root) {
  std::vector<StepFolder> folders;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return folders;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, step_pattern()) && !m[2].matched)
      folders.push_back({std::stoll(m[1].str()), entry.path().string()});
  }
  std::sort(folders.begin(), folders.end(), [](const StepFolder& a, const StepFolder& b) {
    return std::tie(a.step, a.path) < std::tie(b.step, b.path);
  });
  return folders;
}

std::vector<StepFolder> committed_step_folders(const std::string& root) {
  std::vector<StepFolder> committed;
  std::error_code ec;
  for (auto& folder : step_folders(root))
    if (fs::exists(fs::path(folder.path) / kManifestFile, ec)) committed.push_back(std::move(folder));
  return committed;
}

std::vector<int64_t> committed_steps(const std::string& root) {
  std::vector<int64_t> steps;
  for (const auto& folder : committed_step_folders(root)) steps.push_back(folder.step);
  return steps;
}

std::optional<int64_t> latest_step(const std::string& root) {
  std::ifstream in(fs::path(root) / "latest");
  std::string name;
  if (!(in >> name)) return std::nullopt;
  std::smatch m;
  if (!std::regex_match(name, m, step_pattern()) || m[2].matched) return std::nullopt;
  return std::stoll(m[1].str());
}

void write_latest(const std::string& root, int64_t step) {
  try {
    sys::replace_synced((fs::path(root) / "latest").string(), (fs::path(root) / "latest.tmp").string(),
                        step_dir_name(step) + "\n");
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
  fsync_path(root);
}

std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy,
                                         std::optional<int64_t> protect) {
  std::set<int64_t> keep;
  const auto steps = committed_steps(root);
  const auto newest_kept = static_cast<size_t>(std::max<int64_t>(policy.keep_last, 0));
  for (size_t i = steps.size() > newest_kept ? steps.size() - newest_kept : 0; i < steps.size(); ++i)
    keep.insert(steps[i]);
  if (policy.keep_every_steps > 0)
    for (int64_t s : steps)
      if (s % policy.keep_every_steps == 0) keep.insert(s);
  if (const auto latest = latest_step(root)) keep.insert(*latest);
  if (protect) keep.insert(*protect);

  std::vector<fs::path> doomed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, step_pattern())) continue;
    const int64_t step = std::stoll(m[1].str());
    if (m[2].matched) {
      if (!(protect && step == *protect)) doomed.push_back(entry.path());  // a save that never committed
    } else if (fs::exists(entry.path() / kManifestFile) && keep.count(step) == 0) {
      doomed.push_back(entry.path());
    }
    // A step folder without a manifest was damaged by hand: left for its owner to look at.
  }
  std::vector<std::string> deleted;
  for (const auto& path : doomed) {
    fs::remove_all(path, ec);
    if (!ec) deleted.push_back(path.string());
  }
  return deleted;
}

}  // namespace moco::ckpt

namespace moco::ckpt {
std::optional<std::string> find_checkpoint_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / kManifestFile)) return path;
  for (const auto& root : {fs::path(path), fs::path(path) / "checkpoints"}) {
    if (const auto latest = latest_step(root.string());
        latest && fs::exists(fs::path(step_dir(root.string(), *latest)) / kManifestFile))
      return step_dir(root.string(), *latest);
    if (const auto steps = committed_steps(root.string()); !steps.empty()) return step_dir(root.string(), steps.back());
  }
  return std::nullopt;
}

std::string no_checkpoint_message(const std::string& path) {
  return path + ": no checkpoint here (neither a checkpoint folder with a " + kManifestFile +
         ", nor a checkpoints folder or run output_dir holding one)";
}

void check_committed(const std::string& dir, int64_t manifest_step) {
  fs::path folder = fs::path(dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // "step_00000004/"
  const std::string name = folder.filename().string();
  std::smatch m;
  if (!std::regex_match(name, m, step_pattern())) return;  // not named by a run: nothing to compare
  if (m[2].matched)
    throw CheckpointError(dir +
                          ": an uncommitted save (a run renames step_<n>.tmp to step_<n> once every shard and the "
                          "manifest are whole): not read as a checkpoint");
  if (const int64_t folder_step = std::stoll(m[1].str()); folder_step != manifest_step)
    throw CheckpointError(fmt::format(
        "{}: its manifest says step {}, its folder's name step {}: moved or copied by hand, not read as either", dir,
        manifest_step, folder_step));
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (auto dir = find_checkpoint_dir(path)) return *dir;
  throw CheckpointError(no_checkpoint_message(path));
}
}  // namespace moco::ckpt
