#include "run/knn_monitor.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>

namespace moco::run {

KnnMonitor::KnnMonitor(const Config& c, Splits splits, metrics::MetricsLog* metrics, dist::ProcessGroup& group)
    : config_(c), splits_(std::move(splits)), metrics_(metrics), group_(group), normalisation_(augment_options(c)) {}

double KnnMonitor::evaluate(model::Backbone encoder, const std::string& label, int64_t step, double epoch,
                            bool record) {
  const bool was_training = encoder->is_training();
  encoder->eval();
  const auto device = encoder->parameters().front().device();
  const double top1 = evaluate(
      [&](const torch::Tensor& images) {
        return encoder->features(data::normalize_batch(images, normalisation_).to(device));
      },
      label, step, epoch, record);
  encoder->train(was_training);
  return top1;
}

double KnnMonitor::evaluate(const eval::Featurizer& featurizer, const std::string& label, int64_t step, double epoch,
                            bool record) {
  const auto start = std::chrono::steady_clock::now();
  // The bank stays sharded (each rank holds and searches its share); the queries go to every rank.
  const auto subset = config_.knn.subset == "first" ? eval::Subset::kFirst : eval::Subset::kSpread;
  const auto memory =
      eval::extract_shard(featurizer, *splits_.train, config_.knn.batch_size, config_.knn.memory_size, &group_, subset);
  const auto [queries, query_labels] = eval::extract_features(featurizer, *splits_.test, config_.knn.batch_size,
                                                              config_.knn.query_size, &group_, subset);
  eval::KnnOptions options;
  options.k = neighbours(memory.total);
  options.temperature = config_.knn.temperature;
  const auto predicted = eval::knn_predict_sharded(memory.features, memory.labels, memory.total, queries,
                                                   splits_.train->num_classes(), options, group_);
  metrics::KnnRecord r;
  r.top1 = eval::percent_correct(predicted, query_labels);
  r.encoder = label;
  r.step = step;
  r.epoch = epoch;
  r.memory_size = memory.total;
  r.query_size = queries.size(0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ && record) metrics_->write(r);
  spdlog::info("kNN ({}, epoch {:.2f}): top-1 {:.2f}% ({} memory, {} queries, {} dims, k={}, {:.1f}s)",
               label == "raw_pixels" ? "raw pixels" : label + " encoder", epoch, r.top1, r.memory_size, r.query_size,
               queries.size(1), options.k, r.seconds);
  return r.top1;
}

// A k above the bank's images cannot be honoured (a small split, or knn.memory_size below k): the
// vote takes the whole bank, and the log says so rather than print a k that was not used.
int64_t KnnMonitor::neighbours(int64_t bank_size) {
  if (config_.knn.k <= bank_size) return config_.knn.k;
  if (!k_clamp_said_)
    spdlog::warn("knn.k {} is more than the {} images of the kNN memory bank (knn.memory_size {}): k={} used",
                 config_.knn.k, bank_size, config_.knn.memory_size, bank_size);
  k_clamp_said_ = true;
  return bank_size;
}

bool KnnMonitor::raw_baseline_enabled() const {
  if (config_.knn.raw_baseline != "auto") return config_.knn.raw_baseline == "true";
  return splits_.train->height() <= 64 && splits_.train->width() <= 64;
}

double KnnMonitor::evaluate_raw_pixels(int64_t step, double epoch, bool record) {
  return evaluate(eval::raw_pixels(normalisation_), "raw_pixels", step, epoch, record);
}

}  // namespace moco::run
