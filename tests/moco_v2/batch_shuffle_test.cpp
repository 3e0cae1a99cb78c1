#include "moco_v2/batch_shuffle.h"

#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

using moco::moco_v2::BatchShuffle;
using moco::moco_v2::shared_permutation;

namespace {

// Rank r's local batch: rows holding their global index (in two columns, to check rows move whole).
torch::Tensor global_index_rows(int rank, int64_t b) {
  const auto idx = torch::arange(rank * b, (rank + 1) * b, torch::kFloat).unsqueeze(1);
  return torch::cat({idx, -idx}, 1);
}

}  // namespace

TEST(BatchShuffleTest, SharedPermutationIsAPermutationFixedBySeedAndStep) {
  const auto a = shared_permutation(64, 7, 3);
  EXPECT_EQ(a, shared_permutation(64, 7, 3));
  EXPECT_NE(a, shared_permutation(64, 7, 4));
  EXPECT_NE(a, shared_permutation(64, 8, 3));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(BatchShuffleTest, ShuffleDealsThePermutedGlobalBatchAndUnshuffleUndoesIt) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const int64_t b = 6;
  for (int64_t step = 0; step < 5; ++step) {
    const auto perm = shared_permutation(b * world, 11, step);
    const BatchShuffle plan(perm, rank, world);
    const auto local = global_index_rows(rank, b);
    const auto shuffled = plan.shuffle(local, *group);
    ASSERT_EQ(shuffled.sizes(), local.sizes());
    for (int64_t i = 0; i < b; ++i) {
      // Every sample reaches the key encoder exactly once: row i here is global sample perm[rank*b+i].
      EXPECT_EQ(shuffled[i][0].item<int64_t>(), perm[rank * b + i]);
      EXPECT_EQ(shuffled[i][1].item<int64_t>(), -perm[rank * b + i]);
    }
    EXPECT_TRUE(torch::equal(plan.unshuffle(shuffled, *group), local));
  }
}

TEST(BatchShuffleTest, EachSampleIsEncodedOnceAcrossAllRanks) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const int64_t b = 5;
  const auto perm = shared_permutation(b * world, 3, 0);
  const BatchShuffle plan(perm, rank, world);
  const auto seen = group->all_gather(plan.shuffle(global_index_rows(rank, b), *group).select(1, 0).contiguous());
  std::set<int64_t> unique;
  for (int64_t i = 0; i < seen.size(0); ++i) unique.insert(seen[i].item<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(unique.size()), b * world);
  EXPECT_EQ(*unique.rbegin(), b * world - 1);
}

TEST(BatchShuffleTest, ABatchNormGroupHoldsSamplesOfOtherRanks) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  if (world == 1) GTEST_SKIP() << "needs several ranks";
  const int64_t b = 8;
  const auto perm = shared_permutation(b * world, 5, 0);
  const BatchShuffle plan(perm, rank, world);
  const auto shuffled = plan.shuffle(global_index_rows(rank, b), *group);
  int64_t foreign = 0;
  for (int64_t i = 0; i < b; ++i) foreign += shuffled[i][0].item<int64_t>() / b != rank;
  EXPECT_GT(foreign, 0);
  // What all ranks send to others is what all ranks receive from others.
  auto balance = torch::tensor({plan.rows_sent_to_others() - foreign}, torch::kLong);
  group->all_reduce(balance, moco::dist::ReduceOp::kSum);
  EXPECT_EQ(balance.item<int64_t>(), 0);
}

// Unshuffle against a plain-loop oracle built from the permutation alone (no call to shuffle): row i
// of rank r's shuffled batch stands for global sample perm[r*b+i]; after unshuffle, row j of rank q
// must hold what was computed for global sample q*b+j.
TEST(BatchShuffleTest, UnshuffleReturnsEachResultToItsSampleByAPlainLoop) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const int64_t b = 6;
  for (int64_t step = 0; step < 4; ++step) {
    const auto perm = shared_permutation(b * world, 17, step);
    const BatchShuffle plan(perm, rank, world);
    auto results = torch::empty({b, 3}, torch::kFloat);  // a "key" per shuffled row: f(global sample)
    for (int64_t i = 0; i < b; ++i) {
      const auto g = static_cast<float>(perm[rank * b + i]);
      results[i][0] = g;
      results[i][1] = 10 * g + 1;
      results[i][2] = -g;
    }
    const auto back = plan.unshuffle(results, *group);
    ASSERT_EQ(back.sizes(), results.sizes());
    for (int64_t j = 0; j < b; ++j) {
      const auto g = static_cast<float>(rank * b + j);
      EXPECT_EQ(back[j][0].item<float>(), g) << "step " << step << " row " << j;
      EXPECT_EQ(back[j][1].item<float>(), 10 * g + 1) << "step " << step << " row " << j;
      EXPECT_EQ(back[j][2].item<float>(), -g) << "step " << step << " row " << j;
    }
  }
}

// Channels-last images come back channels-last, holding what the contiguous ones do: the key
// encoder's first convolution then needs no permuting copy.
TEST(BatchShuffleTest, ChannelsLastImagesStayChannelsLast) {
  auto group = test_world_group();
  const int rank = group->rank(), world = group->world_size();
  const int64_t b = 4;
  const BatchShuffle plan(shared_permutation(b * world, 5, 2), rank, world);
  torch::manual_seed(rank);
  const auto images = torch::randn({b, 3, 5, 5});
  const auto channels_last = images.contiguous(torch::MemoryFormat::ChannelsLast);
  const auto expected = plan.shuffle(images, *group);
  const auto shuffled = plan.shuffle(channels_last, *group);
  EXPECT_TRUE(shuffled.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_EQ(shuffled.sizes(), images.sizes());
  EXPECT_TRUE(torch::equal(shuffled, expected));
}
