// defines: weighted k-nearest-neighbour classification of features (the kNN monitor's math), and
// extract_features (an encoder's backbone features over a dataset)
#pragma once

#include "data/augment.h"
#include "dist/process_group.h"
#include "data/dataset.h"
#include "model/backbone.h"

#include <functional>

namespace moco::eval {

struct KnnOptions {
  int64_t k = 200;
  double temperature = 0.1;
  int64_t query_chunk = 1024;  // queries scored at once; bounds the [chunk, N] similarity matrix
};

// Features are L2-normalised here; similarity is their dot product. Each of a query's k nearest
// memory samples votes for its label with weight exp(sim / temperature) (Wu et al. 2018).
// Returns the predicted label of every query, int64 [M].
torch::Tensor knn_predict(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                          const torch::Tensor& query_features, int64_t num_classes, const KnnOptions& options);

// The same vote with the memory bank split across the ranks of `group`: each rank holds one shard
// (`memory_shard`, `shard_labels`; `bank_size` rows in all) and every rank the same queries. Each
// rank scores the queries against its shard alone; the ranks' top-k lists are gathered and merged,
// so no rank holds the bank and each does 1/world of the search. Every rank gets every prediction.
// At world 1 it is knn_predict, bit for bit. Collective.
torch::Tensor knn_predict_sharded(const torch::Tensor& memory_shard, const torch::Tensor& shard_labels,
                                  int64_t bank_size, const torch::Tensor& query_features, int64_t num_classes,
                                  const KnnOptions& options, dist::ProcessGroup& group);

// Percentage of predictions equal to their label.
double percent_correct(const torch::Tensor& predicted, const torch::Tensor& labels);

// Percentage of queries whose prediction equals their label.
double knn_top1(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                const torch::Tensor& query_features, const torch::Tensor& query_labels, int64_t num_classes,
                const KnnOptions& options);

// Features [n, d] of a batch of uint8 images [n, C, H, W] (any device; moved to the CPU).
using Featurizer = std::function<torch::Tensor(const torch::Tensor& images)>;

// Which samples a limit below the dataset's size takes: evenly spaced over it, or its first ones.
enum class Subset { kSpread, kFirst };

// Features [N, d] (on the CPU) and labels [N] of `limit` dataset samples, taken as `subset` says (all
// when limit <= 0 or above its size: N = min(limit, size)),
// without a graph. With a group of several ranks (identical featurizers), each rank encodes one
// shard and all receive the whole result.
std::pair<torch::Tensor, torch::Tensor> extract_features(const Featurizer& featurizer, const data::Dataset& dataset,
                                                         int64_t batch_size, int64_t limit = 0,
                                                         dist::ProcessGroup* group = nullptr,
                                                         Subset subset = Subset::kSpread);

// This rank's shard of what extract_features returns: its rows of the n samples (ceil(n/world)
// rows a rank, the last ranks' fewer or none), features on the CPU and labels, and n. Not collective.
struct FeatureShard {
  torch::Tensor features, labels;
  int64_t total = 0;
};
FeatureShard extract_shard(const Featurizer& featurizer, const data::Dataset& dataset, int64_t batch_size,
                           int64_t limit = 0, dist::ProcessGroup* group = nullptr, Subset subset = Subset::kSpread);

// The normalised images, flattened: the raw-pixel baseline's features.
Featurizer raw_pixels(const data::AugmentOptions& normalisation);

// Backbone features of the normalised images, as above, in eval mode (BN running statistics); the
// encoder's mode is restored.
std::pair<torch::Tensor, torch::Tensor> extract_features(model::Backbone encoder, const data::Dataset& dataset,
                                                         const data::AugmentOptions& normalisation, int64_t batch_size,
                                                         int64_t limit = 0, dist::ProcessGroup* group = nullptr);

}  // namespace moco::eval
