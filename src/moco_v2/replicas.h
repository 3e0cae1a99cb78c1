// defines: ReplicaSync (keeps the ranks' MoCo replicas equal: rank 0's start broadcast, rank 0's
// BatchNorm buffers broadcast each step (dist.broadcast_buffers), and every dist.queue_check_every
// steps a check that the queue, its pointer and the BN buffers agree, naming the ranks that differ)
#pragma once

#include "dist/process_group.h"
#include "moco_v2/moco.h"
#include "run/config.h"

#include <cstdint>
#include <vector>

namespace moco::moco_v2 {

class ReplicaSync {
 public:
  ReplicaSync(const run::Config& config, moco_v2::MocoImpl& moco, dist::ProcessGroup& group);

  // Rank 0's query encoder, its BN buffers and the queue everywhere; the key encoder copies it.
  void broadcast_start();
  // Before step `step` (counted from 1): rank 0's BN buffers (dist.broadcast_buffers), and on a
  // check step a copy of them on the device, taken right after the broadcast (hashed on the host
  // after the step: nothing inside a step waits for the device).
  void before_step(int64_t step);
  // After step `step`, on a check step only: collective, throws naming the ranks that differ.
  void check_after_step(int64_t step);
  // Rank 0's BN buffers everywhere: before a save, when the buffers are replicated (they follow
  // rank 0 from the next step on anyway).
  void broadcast_bn_for_save();
  // Rank 0's BN buffers everywhere, whatever the config: the statistics evaluation uses are rank
  // 0's, as in the reference.
  void broadcast_bn_for_eval();
  // Without the per-step broadcast each rank keeps its own BN statistics.
  bool bn_rank_local() const { return world_ > 1 && !broadcast_buffers_; }

 private:
  bool check_step(int64_t step) const;
  moco_v2::MocoImpl& moco_;
  dist::ProcessGroup& group_;
  const int world_;
  // Several ranks, or a world of one that rehearses them (dist.world_group_at_one): the broadcasts
  // and the check run through the group.
  const bool communicates_;
  const bool broadcast_buffers_;
  const int64_t check_every_;
  torch::Tensor bn_at_start_;  // the BN buffers' bytes at a check step's start; undefined when rank-local
};

}  // namespace moco::moco_v2
