#include "eval/knn.h"

#include <torch/torch.h>

#include <numeric>
#include <stdexcept>

namespace moco::eval {

torch::Tensor knn_predict(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                          const torch::Tensor& query_features, int64_t num_classes,
                          const KnnOptions& options) {
  torch::NoGradGuard no_grad;
  namespace F = torch::nn::functional;
  const auto unit = F::NormalizeFuncOptions().dim(1);
  const auto memory = F::normalize(memory_features, unit);
  const auto labels = memory_labels.to(torch::kLong);
  const int64_t k = std::min<int64_t>(options.k, memory.size(0));
  if (k < 1) throw std::invalid_argument("kNN needs a non-empty memory bank and k >= 1");

  std::vector<torch::Tensor> predictions;
  for (int64_t start = 0; start < query_features.size(0); start += options.query_chunk) {
    const auto queries = F::normalize(query_features.narrow(0, start, std::min(options.query_chunk, query_features.size(0) - start)), unit);
    const auto [sim, idx] = torch::mm(queries, memory.t()).topk(k, /*dim=*/1);
    const auto weights = (sim / options.temperature).exp();
    auto votes = torch::zeros({queries.size(0), num_classes}, weights.options());
    votes.scatter_add_(1, labels.index_select(0, idx.flatten()).view_as(idx), weights);
    predictions.push_back(votes.argmax(1));
  }
  return torch::cat(predictions);
}

double knn_top1(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                const torch::Tensor& query_features, const torch::Tensor& query_labels,
                int64_t num_classes, const KnnOptions& options) {
  const auto predicted = knn_predict(memory_features, memory_labels, query_features, num_classes, options);
  return 100.0 * predicted.eq(query_labels.to(torch::kLong)).to(torch::kDouble).mean().item<double>();
}

std::pair<torch::Tensor, torch::Tensor> extract_features(model::ResNet& encoder, const data::Dataset& dataset,
                                                         const data::AugmentOptions& normalisation,
                                                         int64_t batch_size, int64_t limit) {
  torch::NoGradGuard no_grad;
  const bool was_training = encoder->is_training();
  encoder->eval();
  const int64_t n = limit > 0 ? std::min(limit, dataset.size()) : dataset.size();
  std::vector<torch::Tensor> features, labels;
  std::vector<int64_t> indices;
  for (int64_t start = 0; start < n; start += batch_size) {
    indices.resize(std::min(batch_size, n - start));
    std::iota(indices.begin(), indices.end(), start);
    auto [images, batch_labels] = dataset.get_batch(indices);
    features.push_back(encoder->features(data::normalize_batch(images, normalisation)));
    labels.push_back(batch_labels);
  }
  encoder->train(was_training);
  return {torch::cat(features), torch::cat(labels)};
}

}  // namespace moco::eval
