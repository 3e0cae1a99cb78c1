#include "ckpt/checkpoint.h"

#include "ckpt/checkpoint_dir.h"
#include "ckpt/save_phases.h"
#include "sys/durable_file.h"
#include "sys/fault_hooks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <future>
#include <numeric>
#include <utility>

namespace moco::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMessageBytes = 1024;

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// kill_before_manifest, pause_before_manifest and pause_before_latest are decided when rank 0's shard
// is written and fire at the commit.
sys::CheckpointFaultKind& pending_commit_fault() {
  static sys::CheckpointFaultKind pending = sys::CheckpointFaultKind::kNone;
  return pending;
}

void write_text_durably(const fs::path& path, const std::string& text) {
  try {
    sys::write_synced(path.string(), text);
  } catch (const std::runtime_error& e) {
    throw CheckpointError(e.what());
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return shape.empty() ? "scalar" : fmt::format("{}", fmt::join(shape, "x"));
}

// Every entry of `state` must be in the manifest with its shape and dtype, and nothing else.
void check_matches(const Manifest& m, const std::vector<StateEntry>& state, int rank, const std::string& dir) {
  std::set<std::string> expected;
  for (const auto& e : state) {
    expected.insert(e.name);
    const auto* record = m.find(e.name, e.rank_local ? rank % m.world_size : -1);
    if (!record || record->rank_local != e.rank_local)
      throw CheckpointError(
          fmt::format("{}: has no tensor '{}' (a checkpoint of another model or configuration?)", dir, e.name));
    const auto shape = e.tensor.sizes().vec();
    const auto dtype = dtype_name(e.tensor.scalar_type());
    if (record->shape != shape || record->dtype != dtype)
      throw CheckpointError(fmt::format("{}: tensor '{}' is {} {} in the checkpoint, this run has {} {}", dir, e.name,
                                        record->dtype, shape_text(record->shape), dtype, shape_text(shape)));
  }
  for (const auto& record : m.tensors)
    if (!expected.count(record.name))
      throw CheckpointError(fmt::format(
          "{}: holds tensor '{}' that this run does not have (a checkpoint of another model?)", dir, record.name));
}

}  // namespace

void agree_no_errors(const std::string& error, dist::ProcessGroup& group) {
  auto mine = torch::zeros({1, kMessageBytes}, torch::kUInt8);
  const std::string text = error.substr(0, kMessageBytes - 1);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  const auto all = group.world_size() > 1 ? group.all_gather(mine).contiguous() : mine;
  int failed = 0;
  std::string first;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const auto* bytes = static_cast<const char*>(all[r].data_ptr());
    if (bytes[0] == '\0') continue;
    if (failed++ == 0) first = fmt::format("rank {}: {}", r, std::string(bytes, strnlen(bytes, kMessageBytes)));
  }
  if (failed > 1) first += fmt::format(" (and {} other rank(s) failed, see their logs)", failed - 1);
  if (failed) throw CheckpointError(first);
}

std::vector<int> assign_writers(const std::vector<StateEntry>& state, int world_size) {
  std::vector<size_t> order(state.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto sa = state[a].tensor.numel() * state[a].tensor.element_size();
    const auto sb = state[b].tensor.numel() * state[b].tensor.element_size();
    return sa != sb ? sa > sb : state[a].name < state[b].name;
  });
  std::vector<int64_t> load(static_cast<size_t>(world_size), 0);
  std::vector<int> writer(state.size(), -1);
  for (size_t i : order) {
    if (state[i].rank_local) continue;
    const auto least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    writer[i] = least;
    load[static_cast<size_t>(least)] += state[i].tensor.numel() * state[i].tensor.element_size();
  }
  return writer;
}

namespace detail {

std::string nonfinite_state_error(const std::vector<StateEntry>& state, int64_t step) {
  torch::NoGradGuard no_grad;
  struct OnDevice {
    torch::Device device;
    std::vector<size_t> entries;
    std::vector<torch::Tensor> finite;  // bool scalars, one per entry, still on the device
  };
  std::vector<OnDevice> groups;
  for (size_t i = 0; i < state.size(); ++i) {
    const auto& t = state[i].tensor;
    // progress/* is bookkeeping, where NaN means "not measured yet" (a kNN baseline), not a state.
    if (!t.is_floating_point() || state[i].name.rfind("progress/", 0) == 0) continue;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const OnDevice& o) { return o.device == t.device(); });
    if (g == groups.end()) g = groups.insert(g, OnDevice{t.device(), {}, {}});
    g->entries.push_back(i);
    g->finite.push_back(t.detach().isfinite().all());
  }
  std::vector<std::string> bad;
  for (const auto& g : groups) {
    const auto finite = torch::stack(g.finite).to(torch::kCPU);  // this device's one host read
    for (size_t j = 0; j < g.entries.size(); ++j)
      if (!finite[static_cast<int64_t>(j)].item<bool>()) bad.push_back(state[g.entries[j]].name);
  }
  if (bad.empty()) return "";
  std::sort(bad.begin(), bad.end());
  constexpr size_t kNamedAtMost = 4;
  const auto named = static_cast<std::ptrdiff_t>(std::min(bad.size(), kNamedAtMost));
  return fmt::format(
      "checkpoint of step {} refused: {} '{}'{} NaN or Inf (a checkpoint never holds a non-finite tensor); the "
      "checkpoints already committed stay as they are",
      step, bad.size() > 1 ? "tensors" : "tensor", fmt::join(bad.begin(), bad.begin() + named, "', '"),
      bad.size() > kNamedAtMost ? fmt::format(" and {} more hold", bad.size() - kNamedAtMost)
                                : std::string(bad.size() > 1 ? " hold" : " holds"));
}

std::string prepare_save_dir(const std::string& root, int64_t step) {
  const fs::path tmp_dir = step_dir(root, step) + ".tmp";
  try {
    fs::create_directories(root);
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  } catch (const std::exception& e) {
    return tmp_dir.string() + ": cannot create: " + e.what();
  }
  return "";
}

std::vector<int64_t> write_shard(const std::string& tmp_dir, const std::vector<StateEntry>& state,
                                 const std::vector<int>& writers, int rank, int world, int64_t step) {
  const sys::CheckpointFault fault = sys::hooks().checkpoint_fault(step);
  const auto n = static_cast<int64_t>(state.size());
  std::vector<int64_t> crc(static_cast<size_t>(n * world), 0);
  H5TensorWriter shard((fs::path(tmp_dir) / shard_file_name(rank, world)).string());
  shard.write_string_attribute("moco_dist", fmt::format("checkpoint shard {} of {}, step {}", rank, world, step));
  std::vector<int64_t> mine;
  std::vector<torch::Tensor> host;
  for (int64_t i = 0; i < n; ++i) {
    if (!state[i].rank_local && writers[i] != rank) continue;
    mine.push_back(i);
    host.push_back(state[i].tensor.detach().to(torch::kCPU).contiguous());
  }
  // CRC-32s on another thread while HDF5 writes (and runs Fletcher-32) on this one.
  auto crcs = std::async(std::launch::async, [&] {
    std::vector<uint32_t> out;
    for (const auto& t : host) out.push_back(tensor_crc32(t));
    return out;
  });
  try {
    for (size_t j = 0; j < mine.size(); ++j) {
      if (fault.kind == sys::CheckpointFaultKind::kKillInShard && fault.rank == rank && j == mine.size() / 2)
        sys::hooks().kill_for_checkpoint_fault(
            fmt::format("rank {} after {} of {} tensors of its shard", rank, j, mine.size()));
      if (fault.kind == sys::CheckpointFaultKind::kPauseInShard && fault.rank == rank && j == mine.size() / 2)
        sys::hooks().pause_for_checkpoint_fault(
            fmt::format("rank {} after {} of {} tensors of its shard", rank, j, mine.size()));
      shard.write(state[static_cast<size_t>(mine[j])].name, host[j]);
    }
  } catch (...) {
    crcs.wait();
    throw;
  }
  const auto values = crcs.get();
  for (size_t j = 0; j < mine.size(); ++j) crc[static_cast<size_t>(mine[j] * world + rank)] = values[j];
  shard.close();
  if (rank == 0 && (fault.kind == sys::CheckpointFaultKind::kKillBeforeManifest ||
                    fault.kind == sys::CheckpointFaultKind::kPauseBeforeManifest ||
                    fault.kind == sys::CheckpointFaultKind::kPauseBeforeLatest))
    pending_commit_fault() = fault.kind;
  return crc;
}

void commit(const std::string& root, const std::string& tmp, const std::vector<StateEntry>& state,
            const std::vector<int>& writers, const std::vector<int64_t>& crc, const SaveInfo& info, int world) {
  const auto fault = std::exchange(pending_commit_fault(), sys::CheckpointFaultKind::kNone);
  if (fault == sys::CheckpointFaultKind::kKillBeforeManifest)
    sys::hooks().kill_for_checkpoint_fault("rank 0 with every shard written, before the manifest");
  if (fault == sys::CheckpointFaultKind::kPauseBeforeManifest)
    sys::hooks().pause_for_checkpoint_fault("rank 0 with every shard written, before the manifest");
  const fs::path tmp_dir = tmp, final_dir = step_dir(root, info.step);
  Manifest m;
  m.step = info.step;
  m.epoch = info.epoch;
  m.world_size = world;
  m.global_batch = info.global_batch;
  m.config_yaml = info.config_yaml;
  m.notes = info.notes;
  m.torch_version = TORCH_VERSION;
  m.created_utc = utc_now();
  for (size_t i = 0; i < state.size(); ++i) {
    for (int r = 0; r < world; ++r) {
      if (!state[i].rank_local && writers[i] != r) continue;
      TensorRecord t;
      t.name = state[i].name;
      t.shard = r;
      t.rank_local = state[i].rank_local;
      t.shape = state[i].tensor.sizes().vec();
      t.dtype = dtype_name(state[i].tensor.scalar_type());
      t.crc32 = static_cast<uint32_t>(crc[i * static_cast<size_t>(world) + static_cast<size_t>(r)]);
      t.bytes = state[i].tensor.numel() * static_cast<int64_t>(state[i].tensor.element_size());
      m.tensors.push_back(std::move(t));
    }
  }
  write_text_durably(tmp_dir / kManifestFile, manifest_to_json(m));
  fsync_path(tmp_dir.string());
  // A checkpoint of this step from an earlier, abandoned attempt of the run makes way for this one.
  const fs::path old_dir = final_dir.string() + ".old";
  const bool replaces = fs::exists(final_dir);
  if (replaces) {
    fs::remove_all(old_dir);
    fs::rename(final_dir, old_dir);
  }
  fs::rename(tmp_dir, final_dir);
  fsync_path(root);
  if (fault == sys::CheckpointFaultKind::kPauseBeforeLatest)
    sys::hooks().pause_for_checkpoint_fault("rank 0 with " + final_dir.filename().string() +
                                            " renamed, before `latest`");
  try {
    write_latest(root, info.step);
  } catch (...) {
    if (latest_step(root) == info.step) throw;  // replaced, only its folder's fsync failed: it stays
    // Taken back: the folder goes to its .tmp name again (discarded with the failed save), the one it
    // replaced returns. So `latest` still names the newest checkpoint, and nothing of this save stays.
    std::error_code ec;
    fs::rename(final_dir, tmp_dir, ec);
    if (replaces && !ec) fs::rename(old_dir, final_dir, ec);
    if (ec)
      spdlog::warn("{}: cannot take back the checkpoint whose `latest` failed: {}", final_dir.string(), ec.message());
    throw;
  }
  fs::remove_all(old_dir);
}

std::string refusal_or_save_dir(const std::string& root, const std::vector<StateEntry>& state, int64_t step, int rank) {
  auto refusal = nonfinite_state_error(state, step);
  if (!refusal.empty() || rank != 0) return refusal;
  return prepare_save_dir(root, step);
}

void discard_failed_save(const std::string& tmp_dir) {
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  if (ec) spdlog::warn("{}: cannot remove the failed checkpoint's folder: {}", tmp_dir, ec.message());
}

void agree_or_discard(const std::string& error, const std::string& tmp_dir, dist::ProcessGroup& group) {
  try {
    agree_no_errors(error, group);
  } catch (const CheckpointError&) {
    if (group.rank() == 0) discard_failed_save(tmp_dir);
    throw;
  }
}

}  // namespace detail

std::string save_checkpoint(const std::string& root, const std::vector<StateEntry>& state, const SaveInfo& info,
                            dist::ProcessGroup& group) {
  const int rank = group.rank(), world = group.world_size();
  const std::string tmp_dir = step_dir(root, info.step) + ".tmp";
  detail::agree_or_discard(detail::refusal_or_save_dir(root, state, info.step, rank), tmp_dir, group);

  const auto writers = assign_writers(state, world);
  std::string error;
  std::vector<int64_t> crc;
  try {
    crc = detail::write_shard(tmp_dir, state, writers, rank, world, info.step);
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::agree_or_discard(error, tmp_dir, group);
  auto crcs = torch::from_blob(crc.data(), {static_cast<int64_t>(crc.size())}, torch::kInt64);
  if (world > 1) group.all_reduce(crcs, dist::ReduceOp::kSum);  // each slot is written by one rank

  if (rank == 0) {
    try {
      detail::commit(root, tmp_dir, state, writers, crc, info, world);
    } catch (const std::exception& e) {
      error = step_dir(root, info.step) + ": commit failed: " + e.what();
    }
  }
  detail::agree_or_discard(error, tmp_dir, group);
  return step_dir(root, info.step);
}

void verify_checkpoint(const std::string& dir, dist::ProcessGroup& group) {
  std::string error;
  try {
    CheckpointReader reader(dir);
    // load_checkpoint's readers: a replicated tensor's is shard % world; rank r reads the rank-local
    // ones of shard r % W (W the ranks that saved), so shards from this world's size on are not read.
    const int rank = group.rank(), world = group.world_size();
    for (const auto& record : reader.manifest().tensors)
      if (record.rank_local ? record.shard == rank : record.shard % world == rank) reader.read(record);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_no_errors(error, group);
}

Manifest load_checkpoint(const std::string& dir, const std::vector<StateEntry>& state, dist::ProcessGroup& group) {
  const int rank = group.rank(), world = group.world_size();
  const auto n = state.size();
  std::string error;
  std::vector<torch::Tensor> host(n);
  std::vector<int> reader_of(n, -1);
  Manifest manifest;
  try {
    CheckpointReader reader(dir);
    manifest = reader.manifest();
    check_matches(manifest, state, rank, dir);
    // Each stored replicated tensor is read by one rank (shards spread over the new world) and
    // broadcast; rank-local ones by their own rank.
    for (size_t i = 0; i < n; ++i) {
      const auto* record = manifest.find(state[i].name, state[i].rank_local ? rank % manifest.world_size : -1);
      reader_of[i] = state[i].rank_local ? rank : record->shard % world;
      if (reader_of[i] == rank) host[i] = reader.read(*record);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_no_errors(error, group);

  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n; ++i) {
    torch::Tensor target = state[i].tensor;  // a handle: writes reach the caller's tensor
    if (reader_of[i] == rank) target.copy_(host[i]);
    if (state[i].rank_local || world == 1) continue;
    // As raw bytes: every backend carries uint8, not every one carries every dtype (bf16 on MPI).
    auto buffer = target.is_contiguous() ? target : target.contiguous();
    auto bytes = buffer.reshape({-1}).view(torch::kUInt8);
    group.broadcast(bytes, reader_of[i]);
    if (!buffer.is_same(target)) target.copy_(buffer);
  }
  return manifest;
}

}  // namespace moco::ckpt
