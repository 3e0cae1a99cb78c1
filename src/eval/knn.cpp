#include "eval/knn.h"

#include <torch/torch.h>

#include <stdexcept>

namespace moco::eval {

torch::Tensor knn_predict(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                          const torch::Tensor& query_features, int64_t num_classes, const KnnOptions& options) {
  torch::NoGradGuard no_grad;
  namespace F = torch::nn::functional;
  const auto unit = F::NormalizeFuncOptions().dim(1);
  const auto memory = F::normalize(memory_features, unit);
  const auto labels = memory_labels.to(torch::kLong);
  const int64_t k = std::min<int64_t>(options.k, memory.size(0));
  if (k < 1) throw std::invalid_argument("kNN needs a non-empty memory bank and k >= 1");

  std::vector<torch::Tensor> predictions;
  for (int64_t start = 0; start < query_features.size(0); start += options.query_chunk) {
    const auto queries = F::normalize(
        query_features.narrow(0, start, std::min(options.query_chunk, query_features.size(0) - start)), unit);
    const auto [sim, idx] = torch::mm(queries, memory.t()).topk(k, /*dim=*/1);
    const auto weights = (sim / options.temperature).exp();
    auto votes = torch::zeros({queries.size(0), num_classes}, weights.options());
    votes.scatter_add_(1, labels.index_select(0, idx.flatten()).view_as(idx), weights);
    predictions.push_back(votes.argmax(1));
  }
  return torch::cat(predictions);
}

double knn_top1(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                const torch::Tensor& query_features, const torch::Tensor& query_labels, int64_t num_classes,
                const KnnOptions& options) {
  const auto predicted = knn_predict(memory_features, memory_labels, query_features, num_classes, options);
  return 100.0 * predicted.eq(query_labels.to(torch::kLong)).to(torch::kDouble).mean().item<double>();
}

std::pair<torch::Tensor, torch::Tensor> extract_features(const Featurizer& featurizer, const data::Dataset& dataset,
                                                         int64_t batch_size, int64_t limit, dist::ProcessGroup* group) {
  torch::NoGradGuard no_grad;
  const int64_t n = limit > 0 ? std::min(limit, dataset.size()) : dataset.size();
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  // Equal shards (all_gather needs equal shapes); the last rank's runs past n and is cut off below.
  const int64_t shard = (n + world - 1) / world;
  std::vector<torch::Tensor> features, labels;
  std::vector<int64_t> indices;
  for (int64_t start = rank * shard; start < (rank + 1) * shard; start += batch_size) {
    indices.resize(std::min(batch_size, (rank + 1) * shard - start));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = std::min<int64_t>(start + i, n - 1);
    auto [images, batch_labels] = dataset.get_batch(indices);
    features.push_back(featurizer(images).to(torch::kCPU));
    labels.push_back(batch_labels);
  }
  auto all_features = torch::cat(features), all_labels = torch::cat(labels);
  if (world > 1) {
    all_features = group->all_gather(all_features.contiguous());
    all_labels = group->all_gather(all_labels.contiguous());
  }
  return {all_features.narrow(0, 0, n), all_labels.narrow(0, 0, n)};
}

Featurizer raw_pixels(const data::AugmentOptions& normalisation) {
  return
      [normalisation](const torch::Tensor& images) { return data::normalize_batch(images, normalisation).flatten(1); };
}

std::pair<torch::Tensor, torch::Tensor> extract_features(model::ResNet& encoder, const data::Dataset& dataset,
                                                         const data::AugmentOptions& normalisation, int64_t batch_size,
                                                         int64_t limit, dist::ProcessGroup* group) {
  const bool was_training = encoder->is_training();
  encoder->eval();
  const auto device = encoder->parameters().front().device();
  auto result = extract_features(
      [&](const torch::Tensor& images) {
        return encoder->features(data::normalize_batch(images, normalisation).to(device));
      },
      dataset, batch_size, limit, group);
  encoder->train(was_training);
  return result;
}

}  // namespace moco::eval
