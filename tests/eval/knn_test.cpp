#include "eval/knn.h"

#include "data/synthetic.h"
#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

using moco::eval::knn_predict;
using moco::eval::KnnOptions;

namespace {

// Plain loops over doubles, independent of the tensor implementation.
std::vector<int64_t> reference_knn(const torch::Tensor& memory, const torch::Tensor& labels,
                                   const torch::Tensor& queries, int64_t classes, int64_t k, double t) {
  auto unit = [](torch::Tensor x) { return (x / x.norm(2, 1, true)).to(torch::kDouble); };
  const auto m = unit(memory), q = unit(queries);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < q.size(0); ++i) {
    std::vector<std::pair<double, int64_t>> sims;
    for (int64_t j = 0; j < m.size(0); ++j) {
      double s = 0;
      for (int64_t d = 0; d < m.size(1); ++d) s += q[i][d].item<double>() * m[j][d].item<double>();
      sims.push_back({s, labels[j].item<int64_t>()});
    }
    std::partial_sort(sims.begin(), sims.begin() + k, sims.end(), std::greater<>());
    std::vector<double> votes(classes, 0.0);
    for (int64_t j = 0; j < k; ++j) votes[sims[j].second] += std::exp(sims[j].first / t);
    out.push_back(std::max_element(votes.begin(), votes.end()) - votes.begin());
  }
  return out;
}

}  // namespace

TEST(KnnTest, WeightedVoteLetsOneCloseNeighbourBeatTwoFarOnes) {
  // Query (1, 0). Class 0 sits at angle 0.1; class 1 twice at angle 0.6. Majority says 1; with
  // T = 0.1 the weight exp(cos/T) of the close one (e^9.95) outweighs both far ones (2 e^8.25).
  const auto memory = torch::tensor(
      {{std::cos(0.1f), std::sin(0.1f)}, {std::cos(0.6f), std::sin(0.6f)}, {std::cos(0.6f), -std::sin(0.6f)}});
  const auto labels = torch::tensor({0, 1, 1}, torch::kLong);
  const auto query = torch::tensor({{1.0f, 0.0f}});
  KnnOptions options;
  options.k = 3;
  options.temperature = 0.1;
  EXPECT_EQ(knn_predict(memory, labels, query, 2, options).item<int64_t>(), 0);
  options.temperature = 10.0;  // nearly equal weights: the majority wins
  EXPECT_EQ(knn_predict(memory, labels, query, 2, options).item<int64_t>(), 1);
}

TEST(KnnTest, MatchesAPlainLoopReferenceOnRandomData) {
  torch::manual_seed(3);
  const auto memory = torch::randn({300, 8});
  const auto labels = torch::randint(0, 5, {300}, torch::kLong);
  const auto queries = torch::randn({50, 8}) * 3;  // unnormalised on purpose
  KnnOptions options;
  options.k = 20;
  options.temperature = 0.1;
  options.query_chunk = 16;  // several chunks, the last one partial
  const auto predicted = knn_predict(memory, labels, queries, 5, options);
  const auto expected = reference_knn(memory, labels, queries, 5, 20, 0.1);
  ASSERT_EQ(predicted.size(0), 50);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(predicted[i].item<int64_t>(), expected[i]) << i;
}

TEST(KnnTest, Top1IsThePercentageOfCorrectPredictions) {
  const auto memory = torch::eye(4);
  const auto labels = torch::tensor({0, 1, 2, 3}, torch::kLong);
  KnnOptions options;
  options.k = 1;
  // Queries equal memory rows 0..3; labels: three right, one wrong.
  EXPECT_DOUBLE_EQ(
      moco::eval::knn_top1(memory, labels, torch::eye(4), torch::tensor({0, 1, 2, 0}, torch::kLong), 4, options), 75.0);
}

// Rows [begin, end) of `t`, the shard a rank would hold.
static torch::Tensor rows(const torch::Tensor& t, int64_t begin, int64_t end) {
  return t.narrow(0, begin, end - begin);
}

// Each rank holds an uneven share of the bank (one rank none, where there are 4), scores the queries
// against it alone, and every rank still predicts what one process with the whole bank predicts.
// Alone (world 1) the sharded vote is the plain one bit for bit; mpi.np2 and mpi.np4 run it on ranks.
TEST(DistKnnTest, ShardedBankVotesAsTheWholeBankOnEveryRank) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  torch::manual_seed(11);
  const auto memory = torch::randn({301, 8});
  const auto labels = torch::randint(0, 6, {301}, torch::kLong);
  const auto queries = torch::randn({70, 8});
  KnnOptions options;
  options.k = 25;  // more than some shards hold at np4
  options.temperature = 0.1;
  options.query_chunk = 32;
  // Shares of 0.1, 0.5, 0.4 and 0 of the bank at np4; any split must do.
  const std::vector<int64_t> cuts = world == 1   ? std::vector<int64_t>{0, 301}
                                    : world == 2 ? std::vector<int64_t>{0, 20, 301}
                                                 : std::vector<int64_t>{0, 30, 180, 301, 301};
  ASSERT_EQ(static_cast<int>(cuts.size()), world + 1) << "written for 1, 2 and 4 ranks";
  const auto shard = rows(memory, cuts[rank], cuts[rank + 1]);
  const auto shard_labels = rows(labels, cuts[rank], cuts[rank + 1]);
  const auto sharded = moco::eval::knn_predict_sharded(shard, shard_labels, 301, queries, 6, options, *group);
  const auto whole = knn_predict(memory, labels, queries, 6, options);
  ASSERT_EQ(sharded.sizes(), whole.sizes());
  EXPECT_TRUE(sharded.equal(whole)) << "rank " << rank << " of " << world;
  const auto expected = reference_knn(memory, labels, queries, 6, 25, 0.1);
  for (int64_t i = 0; i < 70; ++i) EXPECT_EQ(sharded[i].item<int64_t>(), expected[i]) << i;
}

// A bank smaller than k over several ranks: k is the bank, missing neighbours weigh nothing.
TEST(DistKnnTest, ABankSmallerThanKVotesWithAllOfIt) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  torch::manual_seed(12);
  const auto memory = torch::randn({3, 4});
  const auto labels = torch::tensor({0, 1, 1}, torch::kLong);
  const auto queries = torch::randn({9, 4});
  KnnOptions options;
  options.k = 50;
  options.temperature = 1.0;
  const int64_t begin = std::min<int64_t>(3, rank), end = rank == world - 1 ? 3 : std::min<int64_t>(3, rank + 1);
  const auto sharded = moco::eval::knn_predict_sharded(rows(memory, begin, end), rows(labels, begin, end), 3, queries,
                                                       2, options, *group);
  EXPECT_TRUE(sharded.equal(knn_predict(memory, labels, queries, 2, options))) << "rank " << rank;
}

// The shards of extract_shard, laid end to end, are what extract_features gives every rank.
TEST(DistKnnTest, ShardsOfTheFeaturesAreTheGatheredFeaturesInOrder) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const moco::data::SyntheticDataset dataset(23, 1, 4, 4, 3, 7);
  const auto featurizer = [](const torch::Tensor& images) { return images.flatten(1).to(torch::kFloat); };
  const auto [all, all_labels] = moco::eval::extract_features(featurizer, dataset, 4, 21, group.get());
  const auto mine = moco::eval::extract_shard(featurizer, dataset, 4, 21, group.get());
  const int64_t shard = (21 + world - 1) / world, begin = std::min<int64_t>(21, rank * shard);
  const int64_t end = std::min<int64_t>(21, begin + shard);
  EXPECT_EQ(mine.total, 21);
  ASSERT_EQ(mine.features.size(0), end - begin) << "rank " << rank;
  if (end > begin) {
    EXPECT_TRUE(mine.features.equal(rows(all, begin, end))) << "rank " << rank;
    EXPECT_TRUE(mine.labels.equal(rows(all_labels, begin, end))) << "rank " << rank;
  }
}

// A capped split is sampled evenly over its length, so a split stored class by class (an
// ImageFolder) gives a bounded bank every class, not the first few.
TEST(KnnTest, ACappedSplitIsSampledEvenlyOverIt) {
  const moco::data::SyntheticDataset dataset(24, 1, 4, 4, 3, 9);
  const auto featurizer = [](const torch::Tensor& images) { return images.flatten(1).to(torch::kFloat); };
  const auto [features, labels] = moco::eval::extract_features(featurizer, dataset, 4, 6);
  ASSERT_EQ(features.size(0), 6);
  for (int64_t j = 0; j < 6; ++j) {
    const auto expected = dataset.get(4 * j);
    EXPECT_TRUE(features[j].equal(expected.image.flatten().to(torch::kFloat)))
        << "sample " << j << " is not image " << 4 * j;
    EXPECT_EQ(labels[j].item<int64_t>(), expected.label) << j;
  }
  const auto first = moco::eval::extract_features(featurizer, dataset, 4, 6, nullptr, moco::eval::Subset::kFirst);
  for (int64_t j = 0; j < 6; ++j)
    EXPECT_TRUE(first.first[j].equal(dataset.get(j).image.flatten().to(torch::kFloat))) << "first: sample " << j;
}
