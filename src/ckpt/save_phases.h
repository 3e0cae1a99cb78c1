// defines: the phases of a checkpoint save, shared by save_checkpoint (synchronous, collectives in
// between) and AsyncSaver (a background thread, files in between). Internal to src/ckpt.
#pragma once

#include "ckpt/checkpoint.h"

#include <string>
#include <vector>

namespace moco::ckpt::detail {

// "" when every floating-point tensor of `state` is finite; otherwise the refusal of the save of
// `step`, naming the tensors that hold NaN or Inf. On each tensor's device: one isfinite-all each,
// then one host read per device.
std::string nonfinite_state_error(const std::vector<StateEntry>& state, int64_t step);

// Rank 0: <root>/step_<n>.tmp, empty. Returns an error message, or "".
std::string prepare_save_dir(const std::string& root, int64_t step);

// This rank's shard-<rank>-of-<world>.h5 in tmp_dir, fsynced. Returns the CRC-32 slots (entry i as
// written by rank r at i*world + r), this rank's filled in, the rest 0. Throws CheckpointError.
std::vector<int64_t> write_shard(const std::string& tmp_dir, const std::vector<StateEntry>& state,
                                 const std::vector<int>& writers, int rank, int world, int64_t step);

// The save's first phase: nonfinite_state_error on every rank, then, on rank 0 where the state is
// finite, prepare_save_dir. Returns an error message, or "".
std::string refusal_or_save_dir(const std::string& root, const std::vector<StateEntry>& state, int64_t step, int rank);

// Rank 0, once every shard is written and every slot known: manifest, rename, fsyncs, `latest`.
void commit(const std::string& root, const std::string& tmp_dir, const std::vector<StateEntry>& state,
            const std::vector<int>& writers, const std::vector<int64_t>& crc, const SaveInfo& info, int world);

// Rank 0, once every rank is done with a failed save: its .tmp folder removed, so that a full or
// failing file system keeps nothing of it. A folder that cannot be removed is logged, not thrown
// (the next commit deletes leftovers).
void discard_failed_save(const std::string& tmp_dir);

// agree_no_errors, and on a failure rank 0 discards tmp_dir before the error is thrown on every rank.
void agree_or_discard(const std::string& error, const std::string& tmp_dir, dist::ProcessGroup& group);

}  // namespace moco::ckpt::detail
