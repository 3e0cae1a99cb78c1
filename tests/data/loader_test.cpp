#include "data/loader.h"
#include "data/synthetic.h"

#include "failing_dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using moco::data::AugmentOptions;
using moco::data::Dataset;
using moco::data::epoch_order;
using moco::data::Example;
using moco::data::LoaderOptions;
using moco::data::SyntheticDataset;
using moco::data::TwoViewBatch;
using moco::data::TwoViewLoader;

LoaderOptions order_options(int64_t batch, int world, int rank, uint64_t seed = 7) {
  LoaderOptions o;
  o.batch_size = batch;
  o.world_size = world;
  o.rank = rank;
  o.seed = seed;
  return o;
}

TEST(EpochOrderTest, RanksConcatenateToSingleProcessOrder) {
  const int64_t size = 103, batch = 4;
  const int world = 3;
  const std::vector<int64_t> single = epoch_order(size, order_options(batch * world, 1, 0), 5);
  ASSERT_EQ(single.size(), 96u);  // 103 cut to a multiple of 12
  std::vector<std::vector<int64_t>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(epoch_order(size, order_options(batch, world, r), 5));
  std::vector<int64_t> concatenated;
  for (size_t g = 0; g < 8; ++g) {
    for (const auto& share : ranks) {
      ASSERT_EQ(share.size(), 32u);
      concatenated.insert(concatenated.end(), share.begin() + g * batch, share.begin() + (g + 1) * batch);
    }
  }
  EXPECT_EQ(concatenated, single);
  const std::set<int64_t> distinct(concatenated.begin(), concatenated.end());
  EXPECT_EQ(distinct.size(), concatenated.size());
  EXPECT_TRUE(std::all_of(distinct.begin(), distinct.end(), [](int64_t i) { return i >= 0 && i < 103; }));
}

TEST(EpochOrderTest, EpochsAndSeedsChangeTheOrder) {
  const auto o = order_options(10, 1, 0);
  const auto e0 = epoch_order(100, o, 0);
  EXPECT_EQ(e0, epoch_order(100, o, 0));
  EXPECT_NE(e0, epoch_order(100, o, 1));
  EXPECT_NE(e0, epoch_order(100, order_options(10, 1, 0, /*seed=*/8), 0));
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(100);
  for (int64_t i = 0; i < 100; ++i) all[i] = i;
  EXPECT_EQ(sorted, all);  // a full permutation when nothing is dropped
  EXPECT_NE(e0, all);
}

TEST(EpochOrderTest, DropLastAndNoShuffle) {
  auto o = order_options(5, 2, 1);
  o.shuffle = false;
  EXPECT_EQ(epoch_order(23, o, 3), (std::vector<int64_t>{5, 6, 7, 8, 9, 15, 16, 17, 18, 19}));
  EXPECT_TRUE(epoch_order(9, o, 0).empty());
  EXPECT_EQ(epoch_order(1000, order_options(7, 4, 2), 0).size(), 35u * 7u);  // floor(1000 / 28) batches
}

// main_lincls.py's DistributedSampler(drop_last=False) on the global order `g`: num_samples =
// ceil(N / W), g padded with its own first indices to num_samples x W (cycling when short), rank r
// taking padded[r::W]; its DataLoader then cuts each rank's list into batches of `batch`, the last
// one the rest. Returns each rank's batch sizes and the epoch's multiset of indices.
struct SamplerEpoch {
  std::vector<std::vector<int64_t>> batch_sizes;  // per rank
  std::multiset<int64_t> seen;
};
SamplerEpoch distributed_sampler_epoch(const std::vector<int64_t>& g, int world, int64_t batch) {
  const auto n = static_cast<int64_t>(g.size());
  const int64_t num_samples = (n + world - 1) / world, total = num_samples * world;
  std::vector<int64_t> padded = g;
  for (int64_t i = n; i < total; ++i) padded.push_back(g[static_cast<size_t>(i % n)]);
  SamplerEpoch e;
  for (int r = 0; r < world; ++r) {
    int64_t count = 0;
    for (int64_t i = r; i < total; i += world, ++count) e.seen.insert(padded[static_cast<size_t>(i)]);
    std::vector<int64_t> sizes;
    for (int64_t left = count; left > 0; left -= batch) sizes.push_back(std::min(left, batch));
    e.batch_sizes.push_back(sizes);
  }
  return e;
}

// Keeping the last partial batch (the linear protocol): every image of the epoch is seen, the ranks'
// multiset and batch sizes are the official sampler's, and rank-ordered concatenation is the global
// order cut into global batches (1 rank with the global batch, where no padding is needed).
TEST(EpochOrderTest, KeepLastIsDistributedSamplersEpoch) {
  for (const int64_t n : {103, 100, 96, 5}) {
    for (const int world : {1, 2, 3}) {
      const int64_t batch = 4;
      LoaderOptions o = order_options(batch, world, 0);
      o.drop_last = false;
      LoaderOptions whole = order_options(n, 1, 0);  // the global permutation itself
      const std::vector<int64_t> g = epoch_order(n, whole, 5);
      const SamplerEpoch official = distributed_sampler_epoch(g, world, batch);
      std::multiset<int64_t> seen;
      std::vector<std::vector<int64_t>> ranks;
      for (int r = 0; r < world; ++r) {
        o.rank = r;
        ranks.push_back(epoch_order(n, o, 5));
        seen.insert(ranks.back().begin(), ranks.back().end());
        const int64_t batches = moco::data::batches_per_epoch(n, o);
        ASSERT_EQ(static_cast<size_t>(batches), official.batch_sizes[r].size()) << n << " on " << world;
        std::vector<int64_t> sizes;
        for (int64_t j = 0; j < batches; ++j)
          sizes.push_back(std::min<int64_t>(batch, static_cast<int64_t>(ranks.back().size()) - j * batch));
        EXPECT_EQ(sizes, official.batch_sizes[r]) << n << " images on " << world << " ranks, rank " << r;
      }
      EXPECT_EQ(seen, official.seen) << n << " images on " << world << " ranks";
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(n));  // every image
      if (n % world != 0) continue;
      std::vector<int64_t> concatenated;
      for (size_t first = 0; first < ranks[0].size(); first += batch)
        for (const auto& share : ranks)
          concatenated.insert(concatenated.end(), share.begin() + first,
                              share.begin() + std::min(share.size(), first + batch));
      LoaderOptions single = order_options(batch * world, 1, 0);
      single.drop_last = false;
      EXPECT_EQ(concatenated, epoch_order(n, single, 5)) << n << " on " << world;
      EXPECT_EQ(concatenated, g);
    }
  }
}

// The permutation must not depend on the standard library, so pin one.
TEST(EpochOrderTest, PinnedPermutation) {
  EXPECT_EQ(epoch_order(10, order_options(10, 1, 0, /*seed=*/0), 0),
            (std::vector<int64_t>{0, 2, 5, 9, 8, 1, 3, 7, 4, 6}));
}

TEST(EpochOrderTest, RejectsBadOptions) {
  EXPECT_THROW(epoch_order(10, order_options(0, 1, 0), 0), std::invalid_argument);
  EXPECT_THROW(epoch_order(10, order_options(2, 2, 2), 0), std::invalid_argument);
}

std::shared_ptr<const Dataset> small_dataset(int64_t size = 70) {
  return std::make_shared<SyntheticDataset>(size, 3, 12, 12, 5, /*seed=*/3);
}

AugmentOptions small_augment() {
  AugmentOptions a;
  a.out_size = 10;
  return a;
}

LoaderOptions loader_options(int workers, int prefetch) {
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = workers;
  o.prefetch = prefetch;
  o.seed = 21;
  return o;
}

std::vector<TwoViewBatch> drain(TwoViewLoader& loader) {
  std::vector<TwoViewBatch> out;
  while (auto batch = loader.next()) out.push_back(std::move(*batch));
  return out;
}

std::vector<TwoViewBatch> run_epoch(int workers, int prefetch, int64_t epoch) {
  TwoViewLoader loader(small_dataset(), small_augment(), loader_options(workers, prefetch));
  loader.start_epoch(epoch);
  return drain(loader);
}

void expect_same(const std::vector<TwoViewBatch>& a, const std::vector<TwoViewBatch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t j = 0; j < a.size(); ++j) {
    EXPECT_TRUE(torch::equal(a[j].indices, b[j].indices)) << "batch " << j;
    EXPECT_TRUE(torch::equal(a[j].labels, b[j].labels)) << "batch " << j;
    EXPECT_TRUE(torch::equal(a[j].query, b[j].query)) << "batch " << j;
    EXPECT_TRUE(torch::equal(a[j].key, b[j].key)) << "batch " << j;
  }
}

TEST(LoaderTest, DeliversTheEpochOrderInBatches) {
  const auto dataset = small_dataset();
  const AugmentOptions augment = small_augment();
  LoaderOptions options = loader_options(2, 2);
  options.world_size = 2;
  options.rank = 1;
  options.batch_size = 4;
  TwoViewLoader loader(dataset, augment, options);
  EXPECT_EQ(loader.batches_per_epoch(), 8);  // floor(70 / 8)
  loader.start_epoch(2);
  const auto batches = drain(loader);
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_FALSE(loader.next().has_value());  // stays at the end

  const std::vector<int64_t> order = epoch_order(70, options, 2);
  std::vector<int64_t> seen;
  for (const auto& batch : batches) {
    ASSERT_EQ(batch.query.sizes(), (std::vector<int64_t>{4, 3, 10, 10}));
    ASSERT_EQ(batch.key.sizes(), batch.query.sizes());
    const auto idx = batch.indices.accessor<int64_t, 1>();
    for (int64_t i = 0; i < idx.size(0); ++i) {
      seen.push_back(idx[i]);
      EXPECT_EQ(batch.labels[i].item<int64_t>(), dataset->get(idx[i]).label);
    }
  }
  EXPECT_EQ(seen, order);

  // Views are exactly augment_batch of the images under the documented view seeds.
  const auto& first = batches.front();
  std::vector<int64_t> indices(order.begin(), order.begin() + 4);
  std::vector<uint64_t> query_seeds, key_seeds;
  for (int64_t i : indices) {
    query_seeds.push_back(moco::data::view_seed(options.seed, 2, i, 0));
    key_seeds.push_back(moco::data::view_seed(options.seed, 2, i, 1));
  }
  const torch::Tensor images = dataset->get_batch(indices).first;
  EXPECT_TRUE(torch::equal(first.query, moco::data::augment_batch(images, augment, query_seeds)));
  EXPECT_TRUE(torch::equal(first.key, moco::data::augment_batch(images, augment, key_seeds)));
}

// drop_last=false: 70 images in batches of 8 are 8 full batches and one of 6, also when the epoch
// starts at that last batch (a resumed run).
TEST(LoaderTest, KeepsTheLastPartialBatch) {
  LoaderOptions options = loader_options(2, 2);
  options.drop_last = false;
  TwoViewLoader loader(small_dataset(), small_augment(), options);
  EXPECT_EQ(loader.batches_per_epoch(), 9);
  loader.start_epoch(3);
  const auto batches = drain(loader);
  ASSERT_EQ(batches.size(), 9u);
  std::vector<int64_t> seen;
  for (const auto& batch : batches) {
    const auto idx = batch.indices.accessor<int64_t, 1>();
    for (int64_t i = 0; i < idx.size(0); ++i) seen.push_back(idx[i]);
  }
  EXPECT_EQ(seen, epoch_order(70, options, 3));
  EXPECT_EQ(batches.back().query.sizes(), (std::vector<int64_t>{6, 3, 10, 10}));
  EXPECT_EQ(batches.back().labels.size(0), 6);
  loader.start_epoch(3, 8);
  const auto last = drain(loader);
  ASSERT_EQ(last.size(), 1u);
  expect_same(last, {batches.back()});
}

TEST(LoaderTest, WorkerCountDoesNotChangeOutput) {
  const auto one = run_epoch(1, 1, 0);
  ASSERT_EQ(one.size(), 8u);
  expect_same(one, run_epoch(3, 2, 0));
  expect_same(one, run_epoch(3, 5, 0));
}

TEST(LoaderTest, QueryAndKeyAreDifferentViews) {
  const auto batches = run_epoch(2, 2, 0);
  for (const auto& batch : batches) EXPECT_FALSE(torch::equal(batch.query, batch.key));
  EXPECT_FALSE(torch::equal(batches[0].query, run_epoch(2, 2, 1)[0].query));  // new epoch, new views
}

TEST(LoaderTest, RestartMidEpoch) {
  TwoViewLoader loader(small_dataset(), small_augment(), loader_options(3, 2));
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(1);  // workers are blocked on a full window or mid-batch
  expect_same(drain(loader), run_epoch(1, 1, 1));
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  // Destroying the loader with an epoch in flight must join cleanly.
}

TEST(LoaderTest, NextBeforeStartThrows) {
  TwoViewLoader loader(small_dataset(), small_augment(), loader_options(1, 1));
  EXPECT_THROW(loader.next(), std::logic_error);
}

TEST(LoaderTest, EmptyEpoch) {
  TwoViewLoader loader(small_dataset(5), small_augment(), loader_options(2, 2));
  EXPECT_EQ(loader.batches_per_epoch(), 0);
  loader.start_epoch(0);
  EXPECT_FALSE(loader.next().has_value());
}

// Counts batch reads and checks, at every read, the bound the loader promises: at most `window`
// batches claimed beyond those the consumer has asked for. The consumer raises `asked` before it
// calls next(), so a correct loader can never be caught between the two: no timing window decides
// the outcome, and a loader that reads further ahead is caught at the read that oversteps.
class CountingDataset : public SyntheticDataset {
 public:
  explicit CountingDataset(int window) : SyntheticDataset(80, 1, 8, 8, 4, 2), window_(window) {}
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<int64_t>& indices) const override {
    const int read = ++batches_read;
    const int ahead = read - asked.load();
    int seen = max_ahead.load();
    while (ahead > seen && !max_ahead.compare_exchange_weak(seen, ahead)) {
    }
    return SyntheticDataset::get_batch(indices);
  }
  mutable std::atomic<int> batches_read{0}, max_ahead{0};
  std::atomic<int> asked{0};
  int window() const { return window_; }

 private:
  int window_;
};

// Waits (up to a minute, for a loaded machine) until `count` reads have started; the loader must
// fill its window without anyone consuming.
bool reads_reach(const CountingDataset& dataset, int count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (dataset.batches_read < count) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Consumes a whole epoch slowly, one batch at a time, checking at each stage that the loader fills
// its window (reads reach asked + window) and never goes past it.
void expect_window_kept(int workers, int prefetch, int window) {
  auto dataset = std::make_shared<CountingDataset>(window);
  AugmentOptions augment;
  augment.out_size = 8;
  LoaderOptions options = loader_options(workers, prefetch);
  options.batch_size = 4;
  TwoViewLoader loader(dataset, augment, options);
  const int batches = static_cast<int>(loader.batches_per_epoch());  // 20
  loader.start_epoch(0);
  for (int consumed = 0; consumed < batches; ++consumed) {
    ASSERT_TRUE(reads_reach(*dataset, std::min(batches, consumed + window)))
        << "the loader did not fill its window of " << window << " after " << consumed << " batches";
    // Give a loader that ignores its window every chance to read further before the next request.
    std::this_thread::yield();
    EXPECT_LE(dataset->max_ahead.load(), window)
        << "read " << dataset->max_ahead.load() << " batches ahead of the consumer";
    ++dataset->asked;
    ASSERT_TRUE(loader.next().has_value());
  }
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_EQ(dataset->batches_read.load(), batches);
  EXPECT_LE(dataset->max_ahead.load(), window) << "workers " << workers << ", prefetch " << prefetch;
  EXPECT_EQ(dataset->max_ahead.load(), window) << "the window was never full";
}

TEST(LoaderTest, PrefetchBoundsTheWorkAhead) {
  expect_window_kept(/*workers=*/1, /*prefetch=*/2, /*window=*/2);
  expect_window_kept(/*workers=*/2, /*prefetch=*/3, /*window=*/3);
  // With more workers than prefetch, each worker may hold one batch.
  expect_window_kept(/*workers=*/3, /*prefetch=*/1, /*window=*/3);
}

TEST(LoaderTest, DatasetErrorsPropagateFromNext) {
  LoaderOptions options = loader_options(2, 2);
  options.batch_size = 4;
  options.shuffle = false;
  AugmentOptions augment;
  augment.out_size = 8;
  TwoViewLoader loader(std::make_shared<moco::test_data::FailingDataset>(13, 1, 8), augment, options);
  for (int attempt = 0; attempt < 2; ++attempt) {
    loader.start_epoch(attempt);
    for (int j = 0; j < 3; ++j) ASSERT_TRUE(loader.next().has_value()) << "batch " << j;  // before index 13
    try {
      loader.next();
      FAIL() << "expected the dataset's error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "cannot read sample 13");
    }
    EXPECT_THROW(loader.next(), std::runtime_error);  // the epoch stays failed
  }
}

}  // namespace

// A resumed run starts the loader at the saved batch: it must deliver exactly the rest of the epoch.
TEST(LoaderTest, StartMidEpochDeliversTheRestOfTheEpoch) {
  const auto full = run_epoch(2, 2, 3);
  TwoViewLoader loader(small_dataset(), small_augment(), loader_options(2, 2));
  loader.start_epoch(3, 5);
  const auto rest = drain(loader);
  expect_same(rest, std::vector<TwoViewBatch>(full.begin() + 5, full.end()));
  loader.start_epoch(3, static_cast<int64_t>(full.size()));
  EXPECT_FALSE(loader.next().has_value());
  EXPECT_THROW(loader.start_epoch(3, static_cast<int64_t>(full.size()) + 1), std::invalid_argument);
}

// Save on 4 ranks after k global batches, resume on 2 (or 1) with the same global batch: together
// the two runs visit the epoch's global order exactly once, nothing repeated or skipped.
TEST(EpochOrderTest, ResumingOnAnotherWorldSizeNeitherRepeatsNorSkips) {
  const int64_t size = 1003, global_batch = 24, k = 17;
  const auto global = epoch_order(size, order_options(global_batch, 1, 0), 4);
  for (int resumed_world : {1, 2, 3}) {
    std::vector<int64_t> visited;
    auto visit = [&](int world, int64_t from, int64_t to) {
      std::vector<std::vector<int64_t>> ranks;
      for (int r = 0; r < world; ++r)
        ranks.push_back(epoch_order(size, order_options(global_batch / world, world, r), 4));
      const int64_t per_rank = global_batch / world;
      for (int64_t b = from; b < to; ++b)
        for (int r = 0; r < world; ++r)
          visited.insert(visited.end(), ranks[r].begin() + b * per_rank, ranks[r].begin() + (b + 1) * per_rank);
    };
    visit(4, 0, k);
    visit(resumed_world, k, size / global_batch);
    EXPECT_EQ(visited, global) << "resumed on " << resumed_world;
    std::sort(visited.begin(), visited.end());
    EXPECT_EQ(std::adjacent_find(visited.begin(), visited.end()), visited.end()) << "a sample repeats";
  }
}
