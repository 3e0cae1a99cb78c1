// defines: keep_later_steps_aside (what a resume from an older step keeps of the output folder's
// later checkpoints, which its own saves would overwrite: a fork's timeline, or damaged folders)
#pragma once

#include <cstdint>
#include <string>

namespace moco::run {

// Rank 0, before this run writes anything in output_dir, a resume from step `resumed`: each step
// folder of output_dir/checkpoints past it would be replaced, one by one, by this run's saves.
// - `from_auto` (train.resume=auto chose the newest checkpoint that loads, so none past it loads):
//   each is renamed step_<n>.damaged (`moco_ckpt export` may still take an encoder from it).
// - Otherwise the run forks from an older checkpoint: the later folders move into checkpoints.N/
//   (N as train.resume=never's), metrics.jsonl is kept whole as metrics.jsonl.N and cut after the
//   step, with an event "fork" naming what was kept; `latest` names the resumed step (or nothing).
// Each is logged; a dry run only says what it would do. Throws std::filesystem::filesystem_error
// (naming the paths) when a move fails.
void keep_later_steps_aside(const std::string& output_dir, int64_t resumed, bool from_auto, bool dry_run);

}  // namespace moco::run
