#include "ckpt/async_saver.h"

#include "ckpt/checkpoint_dir.h"
#include "ckpt/save_phases.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace moco::ckpt {
namespace fs = std::filesystem;

// The writer threads use no collectives (the training loop owns the communicators): each rank
// leaves a marker file in the .tmp folder once its shard is durable, with its CRC-32 slots or its
// error, and rank 0 commits when every marker of this save (the token tells saves apart) is there.
namespace {

std::string marker_path(const std::string& tmp_dir, int rank) {
  return (fs::path(tmp_dir) / fmt::format("rank-{}.done", rank)).string();
}

void write_marker(const std::string& tmp_dir, int rank, int64_t token, const std::vector<int64_t>& crc,
                  const std::string& error) {
  const auto path = marker_path(tmp_dir, rank);
  {
    std::ofstream out(path + ".part", std::ios::trunc);
    out << nlohmann::json{{"token", token}, {"crc", crc}, {"error", error}}.dump();
  }
  fs::rename(path + ".part", path);  // whole or absent
}

}  // namespace

AsyncSaver::AsyncSaver(dist::ProcessGroup& group, std::function<void(int64_t)> on_commit, std::chrono::seconds timeout)
    : group_(group), on_commit_(std::move(on_commit)), timeout_(timeout) {}

AsyncSaver::~AsyncSaver() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (error_.empty()) return;
  spdlog::error("asynchronous checkpoint: {}", error_);
  if (group_.rank() == 0) detail::discard_failed_save(tmp_dir_);
}

void AsyncSaver::wait() {
  if (thread_.joinable()) thread_.join();
  std::string error;
  std::swap(error, error_);
  detail::agree_or_discard(error, tmp_dir_, group_);
}

void AsyncSaver::wait_logged(int64_t step) {
  const bool waits = writing();
  const auto start = std::chrono::steady_clock::now();
  if (waits)
    spdlog::info("checkpoint of step {}: the save of step {} is still being written; waiting for it", step, step_);
  wait();
  if (waits)
    spdlog::info(
        "checkpoint of step {}: waited {:.2f}s for the save of step {} (a file system slower than the cadence)", step,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), step_);
}

std::string AsyncSaver::save(const std::string& root, const std::vector<StateEntry>& state, const SaveInfo& info) {
  wait_logged(info.step);
  const std::string tmp_dir = step_dir(root, info.step) + ".tmp";
  tmp_dir_ = tmp_dir;
  step_ = info.step;
  detail::agree_or_discard(detail::refusal_or_save_dir(root, state, info.step, group_.rank()), tmp_dir, group_);
  auto token = torch::tensor({static_cast<int64_t>(std::random_device{}() & 0x7fffffff) + 1}, torch::kInt64);
  group_.broadcast(token, 0);
  // A host copy of what this rank writes (its share and its rank-local state); of the rest only the
  // shapes and dtypes, which rank 0's manifest needs.
  const auto writers = assign_writers(state, group_.world_size());
  std::vector<StateEntry> snapshot;
  snapshot.reserve(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& e = state[i];
    snapshot.push_back({e.name,
                        e.rank_local || writers[i] == group_.rank()
                            ? e.tensor.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous()
                            : torch::empty(e.tensor.sizes(), e.tensor.options().device(torch::kMeta)),
                        e.rank_local});
  }
  writing_ = true;
  thread_ = std::thread(&AsyncSaver::write_in_background, this, root, tmp_dir, std::move(snapshot), writers, info,
                        token.item<int64_t>());
  return step_dir(root, info.step);
}

void AsyncSaver::write_in_background(std::string root, std::string tmp_dir, std::vector<StateEntry> snapshot,
                                     std::vector<int> writers, SaveInfo info, int64_t token) {
  const int rank = group_.rank(), world = group_.world_size();
  std::vector<int64_t> crc;
  std::string error;
  try {
    crc = detail::write_shard(tmp_dir, snapshot, writers, rank, world, info.step);
  } catch (const std::exception& e) {
    error = e.what();
    std::error_code ignored;  // a full disk gets its space back now, not once every rank agrees
    fs::remove(fs::path(tmp_dir) / shard_file_name(rank, world), ignored);
  }
  try {
    write_marker(tmp_dir, rank, token, crc, error);
  } catch (const std::exception& e) {
    error += std::string(error.empty() ? "" : "; ") + "cannot write its marker: " + e.what();
  }
  if (rank != 0) {
    error_ = error;
    writing_ = false;
    return;
  }
  // Rank 0 gathers every rank's slots from the markers, then commits.
  std::vector<int64_t> all(crc.size(), 0);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (int r = 0; r < world && error.empty(); ++r) {
    for (;;) {
      std::ifstream in(marker_path(tmp_dir, r));
      nlohmann::json marker;
      if (in) {
        try {
          marker = nlohmann::json::parse(in);
        } catch (const std::exception&) {
        }
      }
      if (marker.is_object() && marker.value("token", int64_t{0}) == token) {
        const auto theirs = marker.at("error").get<std::string>();
        if (!theirs.empty()) {
          error = fmt::format("rank {}: {}", r, theirs);
        } else {
          const auto slots = marker.at("crc").get<std::vector<int64_t>>();
          for (size_t i = 0; i < all.size() && i < slots.size(); ++i) all[i] += slots[i];
        }
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        error = fmt::format("rank {} did not finish its shard of step {} within {} s", r, info.step, timeout_.count());
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (error.empty()) {
    try {
      for (int r = 0; r < world; ++r) fs::remove(marker_path(tmp_dir, r));
      detail::commit(root, tmp_dir, snapshot, writers, all, info, world);
      if (on_commit_) on_commit_(info.step);
    } catch (const std::exception& e) {
      error = step_dir(root, info.step) + ": commit failed: " + e.what();
    }
  }
  error_ = error;
  writing_ = false;
}

}  // namespace moco::ckpt
