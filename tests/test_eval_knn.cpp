#include "eval/knn.h"

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
