// defines: StateEntry (one named tensor of the state a caller saves and restores), save_checkpoint
// and load_checkpoint (collective: every rank writes its shard in parallel, rank 0 commits
// atomically; a load reads each tensor once and broadcasts it). Knows HDF5, tensors and the
// collectives interface, nothing of MoCo.
#pragma once

#include "ckpt/manifest.h"
#include "dist/process_group.h"

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace moco::ckpt {

struct StateEntry {
  std::string name;      // a dataset path: "<module>/<state_dict key>", e.g. "encoder_q/conv1.weight"
  torch::Tensor tensor;  // saved from, and restored into in place (any device)
  // Replicated tensors are equal on every rank: each is written once, by the rank that the size-
  // balanced assignment picks, so every rank writes about 1/W of the bytes. Rank-local tensors are
  // written by every rank into its own shard.
  bool rank_local = false;
};

struct SaveInfo {
  int64_t step = 0;
  double epoch = 0;
  int64_t global_batch = 0;
  std::string config_yaml;
  std::map<std::string, std::string> notes;  // Manifest::notes
};

// The rank that writes each replicated entry (-1 for rank-local ones): largest first onto the least
// loaded rank, a pure function of the names and sizes, so every rank computes the same plan.
std::vector<int> assign_writers(const std::vector<StateEntry>& state, int world_size);

// Writes <root>/step_<n>.tmp/shard-<r>-of-<W>.h5 on every rank (fsynced), then rank 0 writes and
// fsyncs manifest.json, renames the folder to step_<n>, fsyncs root and points `latest` at it. Every
// rank returns the committed folder or throws the same CheckpointError (naming the rank at fault);
// a failure or a crash at any point leaves earlier checkpoints untouched. Collective. A state whose
// floating-point tensors hold NaN or Inf on any rank is refused before anything is written
// (CheckpointError naming the step and the tensors): a checkpoint never holds a non-finite tensor.
//
// Fault injection for tests (sys/fault_hooks.h), MOCO_CKPT_FAULT=<what>[:<rank>][@<step>]:
// `kill_in_shard` SIGKILLs the rank half-way through its shard; `kill_before_manifest` SIGKILLs rank
// 0 once every shard is written; `pause_in_shard` holds the rank 5 s half-way through its shard.
// <rank> defaults to 0; without @<step> the first save is hit.
std::string save_checkpoint(const std::string& root, const std::vector<StateEntry>& state, const SaveInfo& info,
                            dist::ProcessGroup& group);

// Restores every entry of `state` in place from a committed checkpoint folder, which may have been
// written by another number of ranks (rank-local entries then come from shard rank % W_old). The
// names, shapes and dtypes must match the manifest exactly. Every tensor is read and verified
// (Fletcher-32, CRC-32) by one rank before any entry is touched, so a bad checkpoint throws
// CheckpointError on every rank, naming the file and tensor, and leaves `state` unchanged.
// Collective.
Manifest load_checkpoint(const std::string& dir, const std::vector<StateEntry>& state, dist::ProcessGroup& group);

// Reads every tensor of a committed checkpoint folder against its checksums (Fletcher-32, CRC-32) and
// the manifest's shape and dtype, each by the rank that load_checkpoint would have read it with, and
// keeps nothing: whether it loads, known before there is a state to load it into. Throws the same
// CheckpointError on every rank, naming the rank, file and tensor, as load_checkpoint would. Collective.
void verify_checkpoint(const std::string& dir, dist::ProcessGroup& group);

// Throws the same CheckpointError on every rank if any rank's `error` is non-empty ("rank R: ...",
// the lowest failing rank's words); returns otherwise. Collective.
void agree_no_errors(const std::string& error, dist::ProcessGroup& group);

}  // namespace moco::ckpt
