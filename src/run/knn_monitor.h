// defines: KnnMonitor (the kNN evaluation of a run: an encoder's or the raw pixels' features of the
// train split as memory bank, the test split as queries, the row in metrics.jsonl and the log line)
#pragma once

#include "dist/process_group.h"
#include "eval/knn.h"
#include "metrics/metrics_log.h"
#include "model/backbone.h"
#include "run/config.h"
#include "run/setup.h"

#include <string>

namespace moco::run {

class KnnMonitor {
 public:
  // metrics may be null (ranks other than 0, or no file wanted).
  KnnMonitor(const Config& config, Splits splits, metrics::MetricsLog* metrics, dist::ProcessGroup& group);

  // Top-1 (%) of the encoder's backbone features (eval mode; its mode is restored). Collective.
  double evaluate(model::Backbone encoder, const std::string& label, int64_t step, double epoch, bool record = true);
  // The same for any featurizer; `record`: write the metrics row (the log line is always written).
  double evaluate(const eval::Featurizer& featurizer, const std::string& label, int64_t step, double epoch,
                  bool record = true);
  // knn.raw_baseline: true, false, or auto (on for images up to 64 px per side).
  bool raw_baseline_enabled() const;
  double evaluate_raw_pixels(int64_t step, double epoch, bool record = true);

 private:
  const Config& config_;
  Splits splits_;
  metrics::MetricsLog* metrics_;
  dist::ProcessGroup& group_;
  data::AugmentOptions normalisation_;
  bool k_clamp_said_ = false;

  // knn.k, or the bank's size when k is larger (said once per run).
  int64_t neighbours(int64_t bank_size);
};

}  // namespace moco::run
