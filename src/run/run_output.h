// defines: open_run_output (a run's output folder, its config.yaml and its metrics sinks: metrics.jsonl
// and, with train.tensorboard, the TensorBoard events), shared by moco_dist and moco_lincls
#pragma once

#include "run/config.h"
#include "metrics/metrics_log.h"

#include <optional>

namespace moco::run {

// Creates train.output_dir; rank 0 writes config.yaml there and opens metrics.jsonl (appended when
// the run may resume: it keeps the lines logged before) with tb/ beside it. Other ranks get no sink.
// A dry run writes nothing: it only checks that the folder could be created and written.
// Throws std::runtime_error naming train.output_dir.
std::optional<metrics::MetricsLog> open_run_output(const Config& config, int rank, bool append, bool dry_run = false);

}  // namespace moco::run
