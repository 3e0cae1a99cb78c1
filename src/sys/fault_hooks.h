// defines: FaultHooks, hooks() -- the test hooks that break a run on purpose (MOCO_INJECT_NAN,
// MOCO_CKPT_FAULT), read from the environment in this room only. Unset, each costs a getenv where
// it is asked (once per run, once per checkpoint save) and one comparison per step.
#pragma once

#include <cstdint>
#include <string>

namespace moco::sys {

// What MOCO_INJECT_NAN makes NaN: each is a way a step can go non-finite, and each must be skipped
// (Note [Skipping a step on the device] in model/moco.cpp).
enum class NanTarget {
  kQueries,    // the query images: queries, loss and gradients NaN
  kKeys,       // the key images: keys (and the loss) NaN, the key encoder's BatchNorm statistics too
  kLoss,       // the loss alone (NaN added to it): queries, keys and gradients stay finite
  kGradients,  // the gradient reaching the queries: the loss stays finite, the weights' gradients are NaN
};

// MOCO_INJECT_NAN=STEP[:RANK[:WHAT]] (RANK 0, WHAT `queries` by default; WHAT one of queries, keys,
// loss, grads): that rank's WHAT of that step is NaN.
struct NanInjection {
  int64_t step = -1;  // -1: none
  int rank = 0;
  NanTarget what = NanTarget::kQueries;
  // Whether `rank`'s `target` of `step` (the step being made, counted from 1) is to be NaN.
  bool hits(int64_t at_step, int at_rank, NanTarget target = NanTarget::kQueries) const {
    return step == at_step && rank == at_rank && what == target;
  }
};

// MOCO_CKPT_FAULT=kill_in_shard|kill_before_manifest|pause_in_shard|pause_before_manifest|pause_before_latest
// |pause_in_export|pause_before_export_read|pause_in_pack_commit[:RANK][@STEP]: `kill_in_shard` SIGKILLs RANK half-way
// through its shard; `kill_before_manifest` SIGKILLs rank 0 once every shard is written; `pause_in_shard` holds RANK
// half-way through its shard for kPauseInShardSeconds (a test can break something while a checkpoint is being written);
// `pause_before_manifest` holds rank 0 as long once every shard is written, before the manifest, and
// `pause_before_latest` once the checkpoint's folder has its final name, before `latest` is replaced
// (a test can fill the disk exactly there); `pause_in_export` holds `moco_ckpt export` as long once its
// temporary file is begun (a test can interrupt it there), `pause_before_export_read` once it has read
// the manifest, before any shard (a test can delete the checkpoint as a run's retention would), and
// `pause_in_pack_commit` holds `moco_pack` once every shard is written and the signals are held,
// before the renames (a test can signal it there).
enum class CheckpointFaultKind {
  kNone,
  kKillInShard,
  kKillBeforeManifest,
  kPauseInShard,
  kPauseBeforeManifest,
  kPauseBeforeLatest,
  kPauseInExport,
  kPauseBeforeExportRead,
  kPauseInPackCommit
};
inline constexpr int kPauseInShardSeconds = 5;
struct CheckpointFault {
  CheckpointFaultKind kind = CheckpointFaultKind::kNone;
  int rank = 0;  // RANK, 0 by default
};

class FaultHooks {
 public:
  // MOCO_INJECT_NAN as set now; a warning is logged when it is set. Throws std::invalid_argument
  // ("MOCO_INJECT_NAN='x': expected STEP[:RANK[:queries|keys|loss|grads]]") on a malformed value.
  NanInjection nan_injection() const;
  // The fault MOCO_CKPT_FAULT asks for at the save of `step`: with @STEP the save of that step,
  // without it the process's first save. Call once per save (saves are counted). Throws
  // std::invalid_argument naming the expected form on a malformed value.
  CheckpointFault checkpoint_fault(int64_t step);
  // Prints "MOCO_CKPT_FAULT: SIGKILL <where>" to stderr and kills the process with SIGKILL.
  [[noreturn]] void kill_for_checkpoint_fault(const std::string& where) const;
  // Prints "MOCO_CKPT_FAULT: pausing <where> for 5 s" to stderr and sleeps that long.
  void pause_for_checkpoint_fault(const std::string& where) const;

 private:
  int saves_ = 0;
};

// The process's hooks.
FaultHooks& hooks();

}  // namespace moco::sys
