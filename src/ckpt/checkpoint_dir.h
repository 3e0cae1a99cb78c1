// defines: the on-disk layout of a run's checkpoints (<root>/step_<8 digits>/, step_<n>.tmp while
// being written, the `latest` pointer), discovery of committed checkpoints, retention. Filesystem
// only: rank 0 calls these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moco::ckpt {

std::string step_dir_name(int64_t step);  // "step_00000042"
std::string step_dir(const std::string& root, int64_t step);

// A step_<n> folder: n as a number, and its path as named (step_000000040 is step 40 too).
struct StepFolder {
  int64_t step;
  std::string path;
};
// Every step_<n> folder under root (committed, damaged or emptied; not .tmp), by step.
std::vector<StepFolder> step_folders(const std::string& root);
// Those holding a manifest (committed checkpoints, though maybe damaged since), by step.
std::vector<StepFolder> committed_step_folders(const std::string& root);
// Steps of the committed checkpoints under root (a step_<n> folder holding a manifest), ascending.
// Leftover .tmp folders and anything else are ignored.
std::vector<int64_t> committed_steps(const std::string& root);

// The step `latest` names, if the file exists and parses.
std::optional<int64_t> latest_step(const std::string& root);
// Points `latest` at step (temp file + rename + fsync of root).
void write_latest(const std::string& root, int64_t step);

struct RetentionPolicy {
  int64_t keep_last = 3;         // the newest this many committed checkpoints
  int64_t keep_every_steps = 0;  // > 0: also every checkpoint whose step is a multiple of this
};
// Deletes committed checkpoints the policy does not keep (never the one `latest` names, never
// `protect`) and leftover .tmp folders other than `protect`'s. Returns the deleted folders.
std::vector<std::string> apply_retention(const std::string& root, const RetentionPolicy& policy,
                                         std::optional<int64_t> protect = std::nullopt);

}  // namespace moco::ckpt

namespace moco::ckpt {
// A checkpoint folder from what a user names: the folder itself, a checkpoints root (its `latest`,
// else its newest committed step), or a run's output_dir (its checkpoints/). Throws CheckpointError.
std::string resolve_checkpoint_dir(const std::string& path);
// The same, or nullopt where path holds no checkpoint at all (a caller for whom that is the
// command line's fault, not a damaged checkpoint); no_checkpoint_message says so, naming path.
std::optional<std::string> find_checkpoint_dir(const std::string& path);
std::string no_checkpoint_message(const std::string& path);
// A folder named as a run names its checkpoints must be a committed one of the step its manifest
// says: step_<n>.tmp (a save never committed) or step_<n> holding another step's manifest throws
// CheckpointError naming the folder. A folder named otherwise is not judged.
void check_committed(const std::string& dir, int64_t manifest_step);
}  // namespace moco::ckpt
