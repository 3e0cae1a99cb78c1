#include "data/loader.h"

#include "data/encoded_views.h"
#include "data/hash.h"
#include "data/single_threaded_ops.h"

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace moco::data {
namespace {

constexpr uint64_t kOrderTag = 0x6f72646572ULL;  // keeps shuffle seeds apart from view seeds

void check_options(const LoaderOptions& o) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("loader: " + what);
  };
  require(o.batch_size > 0, "batch_size must be positive, got " + std::to_string(o.batch_size));
  require(o.world_size > 0, "world_size must be positive, got " + std::to_string(o.world_size));
  require(o.rank >= 0 && o.rank < o.world_size,
          "rank " + std::to_string(o.rank) + " outside [0, " + std::to_string(o.world_size) + ")");
}

// Fisher-Yates written out because std::shuffle's use of the generator is left to the standard
// library; this one gives the same permutation everywhere, so ranks on different machines agree.
void shuffle_in_place(std::vector<int64_t>& values, std::mt19937_64& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(detail::uniform_below(rng, i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace

std::vector<int64_t> epoch_order(int64_t dataset_size, const LoaderOptions& options, int64_t epoch) {
  check_options(options);
  if (dataset_size < 0) throw std::invalid_argument("epoch_order: negative dataset size");
  std::vector<int64_t> global(static_cast<size_t>(dataset_size));
  std::iota(global.begin(), global.end(), int64_t{0});
  if (options.shuffle) {
    std::mt19937_64 rng(detail::hash_combine(detail::hash_combine(detail::mix64(options.seed), kOrderTag),
                                             static_cast<uint64_t>(epoch)));
    shuffle_in_place(global, rng);
  }
  const int64_t world = options.world_size, global_batch = world * options.batch_size;
  int64_t total = dataset_size / global_batch * global_batch;
  if (!options.drop_last) {
    total = (dataset_size + world - 1) / world * world;
    // DistributedSampler's padding: the first indices again, as often as needed.
    for (int64_t i = dataset_size; i < total; ++i) global.push_back(global[static_cast<size_t>(i % dataset_size)]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(total / world));
  for (int64_t first = 0; first < total; first += global_batch) {
    const int64_t share = std::min(global_batch, total - first) / world;  // the last: the rest's share
    const auto begin = global.begin() + first + options.rank * share;
    mine.insert(mine.end(), begin, begin + share);
  }
  return mine;
}

int64_t batches_per_epoch(int64_t dataset_size, const LoaderOptions& options) {
  check_options(options);
  const int64_t world = options.world_size, b = options.batch_size;
  if (options.drop_last) return dataset_size / (world * b);
  const int64_t per_rank = (dataset_size + world - 1) / world;
  return (per_rank + b - 1) / b;
}

// Threads live for one epoch: start_epoch cancels and joins the old ones before the new order is
// installed, so workers read `order` and `epoch` without locking.
struct TwoViewLoader::State {
  std::shared_ptr<const Dataset> dataset;
  AugmentOptions augment;
  LoaderOptions options;
  int64_t batches = 0;
  int64_t window = 1;  // batches started or ready beyond the ones handed out

  int64_t epoch = 0;
  std::vector<int64_t> order;
  bool started = false;

  std::mutex mu;
  std::condition_variable ready_cv;  // a batch finished, or a worker failed
  std::condition_variable room_cv;   // the consumer took a batch, or the epoch is cancelled
  bool cancelled = false;
  bool failed = false;          // stop claiming: a result in `results` holds the error
  int64_t next_to_claim = 0;    // the next batch a worker builds
  int64_t next_to_deliver = 0;  // the next batch next() hands out
  struct Result {
    TwoViewBatch batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Result> results;  // finished, not yet delivered; out of order across workers
  std::vector<std::thread> threads;

  TwoViewBatch build(int64_t j) const;
  void work();
  void stop();
};

TwoViewBatch TwoViewLoader::State::build(int64_t j) const {
  const int64_t end = std::min<int64_t>((j + 1) * options.batch_size, static_cast<int64_t>(order.size()));
  const std::vector<int64_t> indices(order.begin() + j * options.batch_size, order.begin() + end);
  const auto b = static_cast<int64_t>(indices.size());  // the last batch may be partial
  std::vector<uint64_t> query_seeds, key_seeds;
  query_seeds.reserve(indices.size());
  key_seeds.reserve(indices.size());
  for (int64_t index : indices) {
    query_seeds.push_back(view_seed(options.seed, epoch, index, 0));
    key_seeds.push_back(view_seed(options.seed, epoch, index, 1));
  }
  TwoViewBatch batch;
  batch.indices = torch::tensor(indices, torch::kInt64);
  const torch::Dtype view_type = options.uint8_views ? torch::kUInt8 : torch::kFloat;
  if (dataset->is_encoded()) {
    // Images of their own sizes: each sample is decoded once and cropped into both views; the
    // views go straight into the batch.
    const int64_t c = dataset->channels(), s = augment.out_size;
    batch.query = torch::empty({b, c, s, s}, view_type);
    if (options.key_view) batch.key = torch::empty({b, c, s, s}, view_type);
    std::vector<int64_t> labels(indices.size());
    for (size_t i = 0; i < indices.size(); ++i) {
      dataset->with_encoded(indices[i], [&](const uint8_t* bytes, size_t size, int64_t label) {
        const auto sample = static_cast<int64_t>(i);
        encoded_train_views(bytes, size, augment, augment.dct_scaling, query_seeds[i], view_out(batch.query, sample),
                            options.key_view ? &key_seeds[i] : nullptr,
                            options.key_view ? view_out(batch.key, sample) : ViewOut(nullptr));
        labels[i] = label;
      });
    }
    batch.labels = torch::tensor(labels, torch::kInt64);
    return batch;
  }
  auto [images, labels] = dataset->get_batch(indices);
  batch.query = augment_batch(images, options_of_view(augment, 0), query_seeds, view_type);
  if (options.key_view) batch.key = augment_batch(images, options_of_view(augment, 1), key_seeds, view_type);
  batch.labels = std::move(labels);
  return batch;
}

void TwoViewLoader::State::work() {
  torch::NoGradGuard no_grad;  // grad mode is thread-local; the consumer's guard does not reach here
  run_ops_single_threaded();   // one worker, one core: the training step has the others
  for (;;) {
    int64_t j = 0;
    {
      std::unique_lock<std::mutex> lock(mu);
      room_cv.wait(lock, [&] {
        return cancelled || failed || next_to_claim >= batches || next_to_claim < next_to_deliver + window;
      });
      if (cancelled || failed || next_to_claim >= batches) return;
      j = next_to_claim++;
    }
    Result result;
    try {
      result.batch = build(j);
      if (options.pin_memory) {
        result.batch.query = result.batch.query.pin_memory();
        if (result.batch.key.defined()) result.batch.key = result.batch.key.pin_memory();
      }
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      if (result.error) {
        failed = true;
        room_cv.notify_all();  // idle workers stop instead of claiming batches nobody will take
      }
      results.emplace(j, std::move(result));
    }
    ready_cv.notify_all();
  }
}

void TwoViewLoader::State::stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    cancelled = true;
  }
  room_cv.notify_all();
  // A worker mid-batch finishes that batch first; cancellation is checked between batches.
  for (auto& thread : threads) thread.join();
  threads.clear();
}

TwoViewLoader::TwoViewLoader(std::shared_ptr<const Dataset> dataset, AugmentOptions augment, LoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (!dataset) throw std::invalid_argument("TwoViewLoader: null dataset");
  check_options(options);
  if (options.workers < 1) throw std::invalid_argument("TwoViewLoader: workers must be at least 1");
  if (options.prefetch < 1) throw std::invalid_argument("TwoViewLoader: prefetch must be at least 1");
  if (options.uint8_views && augment.recipe == Recipe::kSimple)
    throw std::invalid_argument(
        "TwoViewLoader: uint8_views needs the v1, v2 or v3 augmentation; the simple recipe makes its views in float");
  state_->dataset = std::move(dataset);
  state_->augment = std::move(augment);
  state_->options = options;
  state_->batches = data::batches_per_epoch(state_->dataset->size(), options);
  // Each worker needs a batch of its own to stay busy, so the window is never below the worker
  // count even when prefetch is smaller.
  state_->window = std::max<int64_t>(options.prefetch, options.workers);
}

TwoViewLoader::~TwoViewLoader() { state_->stop(); }

int64_t TwoViewLoader::batches_per_epoch() const { return state_->batches; }

const LoaderOptions& TwoViewLoader::options() const { return state_->options; }

void TwoViewLoader::start_epoch(int64_t epoch, int64_t first_batch) {
  State& s = *state_;
  if (first_batch < 0 || first_batch > s.batches)
    throw std::invalid_argument("TwoViewLoader: first batch " + std::to_string(first_batch) + " outside an epoch of " +
                                std::to_string(s.batches) + " batches");
  s.stop();
  s.epoch = epoch;
  s.order = epoch_order(s.dataset->size(), s.options, epoch);
  s.results.clear();
  s.next_to_claim = s.next_to_deliver = first_batch;
  s.cancelled = s.failed = false;
  s.started = true;
  const int64_t threads = std::min<int64_t>(s.options.workers, s.batches);
  for (int64_t t = 0; t < threads; ++t) s.threads.emplace_back([&s] { s.work(); });
}

std::optional<TwoViewBatch> TwoViewLoader::next() {
  State& s = *state_;
  if (!s.started) throw std::logic_error("TwoViewLoader::next called before start_epoch");
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.next_to_deliver >= s.batches) return std::nullopt;
  s.ready_cv.wait(lock, [&] { return s.results.count(s.next_to_deliver) > 0; });
  auto it = s.results.find(s.next_to_deliver);
  // The failed result stays in place, so every later call rethrows until the next start_epoch.
  if (it->second.error) std::rethrow_exception(it->second.error);
  TwoViewBatch batch = std::move(it->second.batch);
  s.results.erase(it);
  ++s.next_to_deliver;
  lock.unlock();
  s.room_cv.notify_all();
  return batch;
}

}  // namespace moco::data
