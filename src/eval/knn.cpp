#include "eval/knn.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace moco::eval {

namespace {

namespace F = torch::nn::functional;

torch::Tensor unit_rows(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(1)); }

// Each query's vote: neighbour j of row i has similarity sim[i][j] and label labels[i][j].
torch::Tensor vote(const torch::Tensor& sim, const torch::Tensor& labels, int64_t num_classes, double temperature) {
  const auto weights = (sim / temperature).exp();
  auto votes = torch::zeros({sim.size(0), num_classes}, weights.options());
  votes.scatter_add_(1, labels, weights);
  return votes.argmax(1);
}

// The k most similar memory rows of each query, most similar first: similarities and labels. With
// fewer than k rows, the missing ones have similarity -inf (weight 0) and label 0.
std::pair<torch::Tensor, torch::Tensor> nearest(const torch::Tensor& queries, const torch::Tensor& memory,
                                                const torch::Tensor& labels, int64_t k) {
  const int64_t found = std::min<int64_t>(k, memory.size(0));
  auto sim = torch::full({queries.size(0), k}, -std::numeric_limits<float>::infinity(), queries.options());
  auto near_labels = torch::zeros({queries.size(0), k}, labels.options());
  if (found > 0) {
    const auto [top, idx] = torch::mm(queries, memory.t()).topk(found, /*dim=*/1);
    sim.narrow(1, 0, found).copy_(top);
    near_labels.narrow(1, 0, found).copy_(labels.index_select(0, idx.flatten()).view_as(idx));
  }
  return {sim, near_labels};
}

// Rows [world * n, k] gathered rank by rank -> [n, world * k], each query's candidates side by side.
torch::Tensor side_by_side(const torch::Tensor& gathered, int world) {
  const int64_t n = gathered.size(0) / world, k = gathered.size(1);
  return gathered.view({world, n, k}).permute({1, 0, 2}).reshape({n, world * k});
}

torch::Tensor predict(const torch::Tensor& memory_features, const torch::Tensor& memory_labels, int64_t bank_size,
                      const torch::Tensor& query_features, int64_t num_classes, const KnnOptions& options,
                      dist::ProcessGroup* group) {
  torch::NoGradGuard no_grad;
  const auto memory = unit_rows(memory_features);
  const auto labels = memory_labels.to(torch::kLong);
  const int64_t k = std::min<int64_t>(options.k, bank_size);
  if (k < 1) throw std::invalid_argument("kNN needs a non-empty memory bank and k >= 1");
  const int world = group ? group->world_size() : 1;

  std::vector<torch::Tensor> predictions;
  for (int64_t start = 0; start < query_features.size(0); start += options.query_chunk) {
    const auto queries =
        unit_rows(query_features.narrow(0, start, std::min(options.query_chunk, query_features.size(0) - start)));
    auto [sim, near_labels] = nearest(queries, memory, labels, k);
    if (world > 1) {
      // The k best of the ranks' k best are the k best of the bank.
      const auto candidates = side_by_side(group->all_gather(sim), world);
      const auto candidate_labels = side_by_side(group->all_gather(near_labels), world);
      const auto [top, pick] = candidates.topk(k, /*dim=*/1);
      sim = top;
      near_labels = candidate_labels.gather(1, pick);
    }
    predictions.push_back(vote(sim, near_labels, num_classes, options.temperature));
  }
  return torch::cat(predictions);
}

}  // namespace

torch::Tensor knn_predict(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                          const torch::Tensor& query_features, int64_t num_classes, const KnnOptions& options) {
  return predict(memory_features, memory_labels, memory_features.size(0), query_features, num_classes, options,
                 nullptr);
}

torch::Tensor knn_predict_sharded(const torch::Tensor& memory_shard, const torch::Tensor& shard_labels,
                                  int64_t bank_size, const torch::Tensor& query_features, int64_t num_classes,
                                  const KnnOptions& options, dist::ProcessGroup& group) {
  return predict(memory_shard, shard_labels, bank_size, query_features, num_classes, options, &group);
}

double knn_top1(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                const torch::Tensor& query_features, const torch::Tensor& query_labels, int64_t num_classes,
                const KnnOptions& options) {
  return percent_correct(knn_predict(memory_features, memory_labels, query_features, num_classes, options),
                         query_labels);
}

double percent_correct(const torch::Tensor& predicted, const torch::Tensor& labels) {
  return 100.0 * predicted.eq(labels.to(torch::kLong)).to(torch::kDouble).mean().item<double>();
}

namespace {

// Sample j of the n taken from the dataset: the j-th, or with kSpread the j-th of n evenly spaced
// over it. A split stored class by class (an ImageFolder) then gives a bounded bank every class.
int64_t sample(int64_t j, int64_t n, int64_t size, Subset subset) {
  return subset == Subset::kFirst || n == size ? j : j * size / n;
}

// Samples [rank * shard, (rank + 1) * shard) of the n taken, encoded in batches, features on the
// CPU. Rows past n repeat the last sample (all_gather needs equal shapes; the caller cuts them off),
// so every batch has the shape it always had.
std::pair<torch::Tensor, torch::Tensor> encode_padded_shard(const Featurizer& featurizer, const data::Dataset& dataset,
                                                            int64_t batch_size, int64_t n, int64_t shard, int rank,
                                                            Subset subset) {
  std::vector<torch::Tensor> features, labels;
  std::vector<int64_t> indices;
  for (int64_t start = rank * shard; start < (rank + 1) * shard; start += batch_size) {
    indices.resize(std::min(batch_size, (rank + 1) * shard - start));
    for (size_t i = 0; i < indices.size(); ++i)
      indices[i] = sample(std::min<int64_t>(start + i, n - 1), n, dataset.size(), subset);
    auto [images, batch_labels] = dataset.get_batch(indices);
    features.push_back(featurizer(images).to(torch::kCPU));
    labels.push_back(batch_labels);
  }
  return {torch::cat(features), torch::cat(labels)};
}

int64_t samples(const data::Dataset& dataset, int64_t limit) {
  return limit > 0 ? std::min(limit, dataset.size()) : dataset.size();
}

}  // namespace

FeatureShard extract_shard(const Featurizer& featurizer, const data::Dataset& dataset, int64_t batch_size,
                           int64_t limit, dist::ProcessGroup* group, Subset subset) {
  torch::NoGradGuard no_grad;
  const int64_t n = samples(dataset, limit);
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  const int64_t shard = (n + world - 1) / world;
  const int64_t rows = std::clamp<int64_t>(n - rank * shard, 0, shard);
  if (rows == 0) return {torch::empty({0, 0}), torch::empty({0}, torch::kLong), n};
  auto [features, labels] = encode_padded_shard(featurizer, dataset, batch_size, n, shard, rank, subset);
  return {features.narrow(0, 0, rows), labels.narrow(0, 0, rows), n};
}

std::pair<torch::Tensor, torch::Tensor> extract_features(const Featurizer& featurizer, const data::Dataset& dataset,
                                                         int64_t batch_size, int64_t limit, dist::ProcessGroup* group,
                                                         Subset subset) {
  torch::NoGradGuard no_grad;
  const int64_t n = samples(dataset, limit);
  const int world = group ? group->world_size() : 1;
  const int rank = group ? group->rank() : 0;
  // Equal shards (all_gather needs equal shapes); the last rank's runs past n and is cut off below.
  const int64_t shard = (n + world - 1) / world;
  auto [all_features, all_labels] = encode_padded_shard(featurizer, dataset, batch_size, n, shard, rank, subset);
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

std::pair<torch::Tensor, torch::Tensor> extract_features(model::Backbone encoder, const data::Dataset& dataset,
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
