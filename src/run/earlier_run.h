// defines: keep_earlier_run_files and next_free_suffix (what a fresh start keeps of an earlier run in
// its output folder, and under which number: checkpoints.N/, metrics.jsonl.N, config.yaml.N, tb.N/)
#pragma once

#include <string>

namespace moco::run {

// Renames (rank 0, before this run writes anything there) an earlier run's metrics.jsonl (non-empty),
// config.yaml and tb/ (non-empty), and with checkpoints_too its checkpoints/ (holding a step folder),
// each to NAME.N, N next_free_suffix's, and warns naming them; a dry run only says what it would keep.
// Throws std::filesystem::filesystem_error (naming both paths) when a rename fails.
void keep_earlier_run_files(const std::string& output_dir, bool checkpoints_too, bool dry_run);

// The N under which a fresh start in out_dir keeps an earlier run's files: the first that none of
// checkpoints.N, metrics.jsonl.N, config.yaml.N, tb.N has taken.
int next_free_suffix(const std::string& out_dir);

}  // namespace moco::run
