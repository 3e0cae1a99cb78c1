// defines: open_run_output (a run's output folder, its config.yaml and its metrics sinks: metrics.jsonl
// and, with train.tensorboard, the TensorBoard events), lock_output_dir and FolderInUse (one run at a
// time in a folder), shared by moco_dist and moco_lincls
#pragma once

#include "run/config.h"
#include "metrics/metrics_log.h"
#include "sys/folder_lock.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace moco::run {

class Checkpointing;

// Another process holds the output folder's lock: the run ends with exit 2 before writing anything
// (not a ConfigError: the folder's logs are the other run's, and no refusal may take them back).
class FolderInUse : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Rank 0 makes `output_dir` (named by `key` in messages, e.g. train.output_dir) and takes its lock for
// the run's life; every rank learns the verdict (a collective, so every rank calls this), and all of
// them throw FolderInUse naming the holder's host and pid when another process holds it. A second run
// in one folder would resume from the first's checkpoint while it trains and delete its save in
// progress. On a file system without locks rank 0 warns and the run goes on.
// First, before anything is made, all throw ConfigError if output_dir lies inside another run's
// checkpoints/ (its retention would delete it whole) or inside the folder of a running run.
// Once held, check_log_writes (rank 0, after every step) watches the lock file: deleted, the run stops
// after the step with a checkpoint (as for SIGUSR1); held by another process, it stops at once
// (std::runtime_error) without writing another checkpoint.
void lock_output_dir(const std::string& output_dir, const std::string& key, int rank, sys::FolderLock& lock);

// Creates train.output_dir; rank 0 writes config.yaml there and opens metrics.jsonl (appended when
// the run may resume: it keeps the lines logged before) with tb/ beside it. Other ranks get no sink.
// A resume first keeps aside the step folders past its checkpoint (Checkpointing::keep_later_steps_aside).
// A fresh start (nothing to resume) keeps an earlier run's metrics.jsonl, config.yaml and tb/ (and, with
// train.resume=never, its checkpoints/) as NAME.N (keep_earlier_run_files).
// A dry run writes nothing: it only checks that the folder could be created and written, and is not
// misplaced (as lock_output_dir refuses it). Throws std::runtime_error naming train.output_dir.
std::optional<metrics::MetricsLog> open_run_output(const Config& config, int rank, const Checkpointing& checkpointing,
                                                   bool dry_run = false);

}  // namespace moco::run
