// defines: weighted k-nearest-neighbour classification of features (the kNN monitor's math), and
// extract_features (an encoder's backbone features over a dataset)
#pragma once

#include "data/augment.h"
#include "dist/process_group.h"
#include "data/dataset.h"
#include "model/resnet.h"

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

// Percentage of queries whose prediction equals their label.
double knn_top1(const torch::Tensor& memory_features, const torch::Tensor& memory_labels,
                const torch::Tensor& query_features, const torch::Tensor& query_labels, int64_t num_classes,
                const KnnOptions& options);

// Features [n, d] of a batch of uint8 images [n, C, H, W] (any device; moved to the CPU).
using Featurizer = std::function<torch::Tensor(const torch::Tensor& images)>;

// Features [N, d] (on the CPU) and labels [N] of dataset samples [0, limit) (all when limit <= 0),
// without a graph. With a group of several ranks (identical featurizers), each rank encodes one
// shard and all receive the whole result.
std::pair<torch::Tensor, torch::Tensor> extract_features(const Featurizer& featurizer, const data::Dataset& dataset,
                                                         int64_t batch_size, int64_t limit = 0,
                                                         dist::ProcessGroup* group = nullptr);

// The normalised images, flattened: the raw-pixel baseline's features.
Featurizer raw_pixels(const data::AugmentOptions& normalisation);

// Backbone features of the normalised images, as above, in eval mode (BN running statistics); the
// encoder's mode is restored.
std::pair<torch::Tensor, torch::Tensor> extract_features(model::ResNet& encoder, const data::Dataset& dataset,
                                                         const data::AugmentOptions& normalisation, int64_t batch_size,
                                                         int64_t limit = 0, dist::ProcessGroup* group = nullptr);

}  // namespace moco::eval
