#include "run/later_steps.h"

#include "ckpt/checkpoint_dir.h"
#include "run/earlier_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace moco::run {
namespace fs = std::filesystem;
namespace {

std::vector<ckpt::StepFolder> later_folders(const fs::path& root, int64_t resumed) {
  std::vector<ckpt::StepFolder> later;
  for (auto& folder : ckpt::step_folders(root.string()))
    if (folder.step > resumed) later.push_back(std::move(folder));
  return later;
}

std::string names(const std::vector<ckpt::StepFolder>& folders) {
  std::vector<std::string> list;
  for (const auto& folder : folders) list.push_back(fs::path(folder.path).filename().string());
  return fmt::format("{}", fmt::join(list, ", "));
}

// The first free step_<n>.damaged[.k] beside `folder`.
fs::path damaged_name(const fs::path& folder) {
  std::error_code ec;
  fs::path name = folder.string() + ".damaged";
  for (int k = 2; fs::exists(name, ec); ++k) name = folder.string() + ".damaged." + std::to_string(k);
  return name;
}

// metrics.jsonl's rows up to the first of a later step (a row that does not parse ends them too: a
// torn last line), then the fork's own row.
void cut_metrics_after(const fs::path& kept, const fs::path& metrics, int64_t resumed, const nlohmann::json& fork) {
  std::ifstream in(kept);
  std::ofstream out(metrics, std::ios::trunc);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || (row.contains("step") && row["step"].is_number() && row["step"].get<int64_t>() > resumed))
      break;
    out << line << '\n';
  }
  out << fork.dump() << '\n';
  if (!out.flush()) throw fs::filesystem_error("cannot write", metrics, std::make_error_code(std::errc::io_error));
}

void mark_damaged(const std::vector<ckpt::StepFolder>& later, int64_t resumed, bool dry_run) {
  for (const auto& folder : later) {
    const fs::path to = damaged_name(folder.path);
    if (dry_run) {
      spdlog::info("  resume: {} does not load; it would be kept as {}", folder.path, to.filename().string());
      continue;
    }
    fs::rename(folder.path, to);
    spdlog::warn(
        "resume: {} does not load and this run's checkpoints from step {} on would replace it: kept as {} "
        "(`moco_ckpt verify` names what is damaged; `moco_ckpt export` may still take an encoder from it)",
        folder.path, resumed, to.string());
  }
}

void fork_from(const fs::path& out_dir, const std::vector<ckpt::StepFolder>& later, int64_t resumed, bool dry_run) {
  const int n = next_free_suffix(out_dir.string());
  const fs::path aside = out_dir / fmt::format("checkpoints.{}", n);
  const fs::path metrics = out_dir / "metrics.jsonl", metrics_aside = out_dir / fmt::format("metrics.jsonl.{}", n);
  std::error_code ec;
  const bool has_metrics = fs::exists(metrics, ec);
  const auto what = fmt::format("this folder's later checkpoints ({}) kept in {}{}", names(later), aside.string(),
                                has_metrics ? fmt::format(", metrics.jsonl whole as {}", metrics_aside.string()) : "");
  if (dry_run) {
    spdlog::info("  resume: a fork at step {}: {}", resumed, what);
    return;
  }
  fs::create_directory(aside);
  for (const auto& folder : later) fs::rename(folder.path, aside / fs::path(folder.path).filename());
  const fs::path root = out_dir / "checkpoints";
  const auto latest = ckpt::latest_step(root.string());
  if (latest && *latest > resumed) {
    if (fs::exists(ckpt::step_dir(root.string(), resumed), ec))
      ckpt::write_latest(root.string(), resumed);
    else
      fs::remove(root / "latest");
  }
  if (has_metrics) {
    fs::rename(metrics, metrics_aside);
    nlohmann::json fork{{"event", "fork"}, {"step", resumed}, {"kept_aside", aside.filename().string()}};
    for (const auto& folder : later) fork["later_steps"].push_back(folder.step);
    cut_metrics_after(metrics_aside, metrics, resumed, fork);
  }
  spdlog::warn(
      "resume: a fork at step {}, older than this folder's newest checkpoint: {}; metrics.jsonl goes on "
      "from step {}",
      resumed, what, resumed);
}

}  // namespace

void keep_later_steps_aside(const std::string& output_dir, int64_t resumed, bool from_auto, bool dry_run) {
  const fs::path out_dir(output_dir);
  const auto later = later_folders(out_dir / "checkpoints", resumed);
  if (later.empty()) return;
  if (from_auto)
    mark_damaged(later, resumed, dry_run);
  else
    fork_from(out_dir, later, resumed, dry_run);
}

}  // namespace moco::run
