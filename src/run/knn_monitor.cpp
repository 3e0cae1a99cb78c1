#include "run/knn_monitor.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>

namespace moco::run {

KnnMonitor::KnnMonitor(const Config& c, Splits splits, metrics::MetricsLog* metrics, dist::ProcessGroup& group)
    : config_(c), splits_(std::move(splits)), metrics_(metrics), group_(group), normalisation_(augment_options(c)) {}

double KnnMonitor::evaluate(model::ResNet& encoder, const std::string& label, int64_t step, double epoch, bool record) {
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
  const auto [memory, memory_labels] =
      eval::extract_features(featurizer, *splits_.train, config_.knn.batch_size, config_.knn.memory_size, &group_);
  const auto [queries, query_labels] =
      eval::extract_features(featurizer, *splits_.test, config_.knn.batch_size, config_.knn.query_size, &group_);
  eval::KnnOptions options;
  options.k = config_.knn.k;
  options.temperature = config_.knn.temperature;
  metrics::KnnRecord r;
  r.top1 = eval::knn_top1(memory, memory_labels, queries, query_labels, splits_.train->num_classes(), options);
  r.encoder = label;
  r.step = step;
  r.epoch = epoch;
  r.memory_size = memory.size(0);
  r.query_size = queries.size(0);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (metrics_ && record) metrics_->write(r);
  spdlog::info("kNN ({}, epoch {:.2f}): top-1 {:.2f}% ({} memory, {} queries, {} dims, k={}, {:.1f}s)",
               label == "raw_pixels" ? "raw pixels" : label + " encoder", epoch, r.top1, r.memory_size, r.query_size,
               memory.size(1), options.k, r.seconds);
  return r.top1;
}

bool KnnMonitor::raw_baseline_enabled() const {
  if (config_.knn.raw_baseline != "auto") return config_.knn.raw_baseline == "true";
  return splits_.train->height() <= 64 && splits_.train->width() <= 64;
}

double KnnMonitor::evaluate_raw_pixels(int64_t step, double epoch, bool record) {
  return evaluate(eval::raw_pixels(normalisation_), "raw_pixels", step, epoch, record);
}

}  // namespace moco::run
