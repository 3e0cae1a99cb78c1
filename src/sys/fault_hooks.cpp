#include "sys/fault_hooks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace moco::sys {

namespace {

constexpr std::array<std::pair<const char*, NanTarget>, 4> kNanTargets{{{"queries", NanTarget::kQueries},
                                                                        {"keys", NanTarget::kKeys},
                                                                        {"loss", NanTarget::kLoss},
                                                                        {"grads", NanTarget::kGradients}}};

const char* nan_target_name(NanTarget what) {
  for (const auto& [name, target] : kNanTargets)
    if (target == what) return name;
  return "?";
}

}  // namespace

NanInjection FaultHooks::nan_injection() const {
  NanInjection n;
  const char* env = std::getenv("MOCO_INJECT_NAN");
  if (!env) return n;
  static const std::regex pattern(R"((\d+)(?::(\d+)(?::(queries|keys|loss|grads))?)?)");
  std::cmatch m;
  if (!std::regex_match(env, m, pattern))
    throw std::invalid_argument(
        fmt::format("MOCO_INJECT_NAN='{}': expected STEP[:RANK[:queries|keys|loss|grads]]", env));
  n.step = std::stoll(m[1].str());
  if (m[2].matched) n.rank = std::stoi(m[2].str());
  for (const auto& [name, target] : kNanTargets)
    if (m[3].matched && m[3].str() == name) n.what = target;
  spdlog::warn("MOCO_INJECT_NAN: rank {}'s {} of step {} will be NaN", n.rank, nan_target_name(n.what), n.step);
  return n;
}

CheckpointFault FaultHooks::checkpoint_fault(int64_t step) {
  const bool first_save = saves_++ == 0;
  const char* env = std::getenv("MOCO_CKPT_FAULT");
  if (!env || !*env) return {};
  std::smatch m;
  const std::string spec = env;
  static const std::regex pattern(
      R"((kill_in_shard|kill_before_manifest|pause_in_shard|pause_before_manifest|pause_before_latest|pause_in_export|pause_before_export_read|pause_in_pack_commit)(?::(\d+))?(?:@(\d+))?)");
  if (!std::regex_match(spec, m, pattern))
    throw std::invalid_argument("MOCO_CKPT_FAULT='" + spec +
                                "': expected kill_in_shard|kill_before_manifest|pause_in_shard|pause_before_manifest|"
                                "pause_before_latest|pause_in_export|pause_before_export_read|pause_in_pack_commit["
                                ":RANK][@STEP]");
  const bool hit = m[3].matched ? std::stoll(m[3].str()) == step : first_save;
  if (!hit) return {};
  const std::string name = m[1].str();
  const auto kind = name == "kill_in_shard"              ? CheckpointFaultKind::kKillInShard
                    : name == "pause_in_shard"           ? CheckpointFaultKind::kPauseInShard
                    : name == "pause_before_manifest"    ? CheckpointFaultKind::kPauseBeforeManifest
                    : name == "pause_before_latest"      ? CheckpointFaultKind::kPauseBeforeLatest
                    : name == "pause_in_export"          ? CheckpointFaultKind::kPauseInExport
                    : name == "pause_before_export_read" ? CheckpointFaultKind::kPauseBeforeExportRead
                    : name == "pause_in_pack_commit"     ? CheckpointFaultKind::kPauseInPackCommit
                                                         : CheckpointFaultKind::kKillBeforeManifest;
  return {kind, m[2].matched ? std::stoi(m[2].str()) : 0};
}

void FaultHooks::kill_for_checkpoint_fault(const std::string& where) const {
  std::fprintf(stderr, "MOCO_CKPT_FAULT: SIGKILL %s\n", where.c_str());
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();
}

void FaultHooks::pause_for_checkpoint_fault(const std::string& where) const {
  std::fprintf(stderr, "MOCO_CKPT_FAULT: pausing %s for %d s\n", where.c_str(), kPauseInShardSeconds);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(kPauseInShardSeconds));
}

FaultHooks& hooks() {
  static FaultHooks the_hooks;
  return the_hooks;
}

}  // namespace moco::sys
