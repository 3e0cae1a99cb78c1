// GradientReducer and broadcast_parameters. The Reducer{Layout,Fake,Broadcast} suites run in one
// process (a fake W-rank group stands in for the world); ReducerWorld runs against the job's real
// group, so it checks real averaging when the binary runs under mpirun.
#include "dist/reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "test_world.h"  // test_world_group(): every rank of this run

namespace moco::dist {
namespace {

// The result of a sum over W ranks that all hold our tensor, applied when waited for: a reducer
// that copied the bucket back before waiting would see the unreduced values.
// `on_wait` runs at the first wait (the test records when that was).
class DeferredSumWork final : public Work {
 public:
  DeferredSumWork(torch::Tensor tensor, int64_t factor, std::function<void()> on_wait)
      : tensor_(std::move(tensor)), factor_(factor), on_wait_(std::move(on_wait)) {}
  void progress() override { ++progress_calls_; }
  int64_t progress_calls() const { return progress_calls_.load(); }
  void wait() override {
    if (done_) return;
    on_wait_();
    torch::NoGradGuard no_grad;
    tensor_.mul_(factor_);
    done_ = true;
  }

 private:
  torch::Tensor tensor_;
  int64_t factor_;
  std::function<void()> on_wait_;
  bool done_ = false;
  std::atomic<int64_t> progress_calls_{0};  // from the reducer's progress thread
};

struct AllReduceCall {
  int64_t numel;
  const void* data;
  bool during_backward;
  bool had_nan;  // some slot of the bucket was not written when the bucket launched
  // When it was first waited for: during backward, and how many all-reduces had been launched by then.
  bool waited_during_backward = false;
  size_t launched_when_waited = 0;
};

struct BroadcastCall {
  int64_t numel;
  torch::ScalarType dtype;
  const void* data;  // the memory the collective wrote
};

// Pretends to be rank `rank` of `world` identical ranks and records every collective.
class RecordingProcessGroup final : public ProcessGroup {
 public:
  explicit RecordingProcessGroup(int world, int rank = 0) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

  std::shared_ptr<Work> all_reduce_async(torch::Tensor& tensor, ReduceOp op) override {
    const size_t index = all_reduces.size();
    all_reduces.push_back({tensor.numel(), tensor.data_ptr(), in_backward, tensor.isnan().any().item<bool>()});
    works.push_back(std::make_shared<DeferredSumWork>(tensor, op == ReduceOp::kSum ? world_ : 1, [this, index] {
      all_reduces[index].waited_during_backward = in_backward;
      all_reduces[index].launched_when_waited = all_reduces.size();
    }));
    return works.back();
  }
  bool progresses_only_inside_calls() const override { return needs_progress; }
  torch::Tensor all_gather(const torch::Tensor& tensor) override {
    return torch::cat(std::vector<torch::Tensor>(static_cast<size_t>(world_), tensor));
  }
  // As if root's tensors were ours plus one: shows whether every element found its way back.
  void broadcast(torch::Tensor& tensor, int root) override {
    broadcasts.push_back({tensor.numel(), tensor.scalar_type(), tensor.data_ptr()});
    if (rank_ != root) tensor.add_(1);
  }
  torch::Tensor all_to_all(const torch::Tensor&, const std::vector<int64_t>&, const std::vector<int64_t>&) override {
    throw std::logic_error("RecordingProcessGroup: all_to_all not used by these tests");
  }
  void barrier() override {}

  bool in_backward = false;  // set by the test around backward (CPU backward runs on its thread)
  std::vector<AllReduceCall> all_reduces;
  std::vector<std::shared_ptr<DeferredSumWork>> works;  // one per all-reduce
  std::vector<BroadcastCall> broadcasts;
  bool needs_progress = false;  // read when a reducer is made

 private:
  int world_;
  int rank_;
};

// Parameter bytes: conv1 864+32, conv2 2304+32, fc 320+40.
struct TinyNet : torch::nn::Module {
  TinyNet() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, /*kernel_size=*/3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, /*kernel_size=*/3)));
    fc = register_module("fc", torch::nn::Linear(8, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1->forward(x));
    x = torch::relu(conv2->forward(x));
    return fc->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::Linear fc{nullptr};
};

constexpr int64_t kTinyFirstCap = 256;
constexpr int64_t kTinyCap = 1024;

struct NamedParams {
  std::vector<torch::Tensor> tensors;
  std::vector<std::string> names;
};

NamedParams named_params(const torch::nn::Module& module) {
  NamedParams out;
  for (const auto& item : module.named_parameters()) {
    out.names.push_back(item.key());
    out.tensors.push_back(item.value());
  }
  return out;
}

torch::Tensor tiny_loss(TinyNet& net, int64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor x = torch::randn({4, 3, 8, 8});
  const torch::Tensor y = torch::randint(0, 10, {4}, torch::kLong);
  return torch::nn::functional::cross_entropy(net.forward(x), y);
}

void clear_grads(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) p.mutable_grad() = torch::Tensor();
}

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().clone());
  return out;
}

// Each rank's `grads` averaged over the ranks of `group` by blocking all-reduces: the reducer's reference.
std::vector<torch::Tensor> mean_over_ranks(std::vector<torch::Tensor> grads, ProcessGroup& group) {
  for (auto& g : grads) {
    group.all_reduce(g, ReduceOp::kSum);
    g.div_(group.world_size());
  }
  return grads;
}

void poison(const GradientReducer& reducer) {
  torch::NoGradGuard no_grad;
  for (const auto& flat : reducer.bucket_buffers()) flat.fill_(std::numeric_limits<float>::quiet_NaN());
}

bool any_nan(const std::vector<torch::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.isnan().any().item<bool>()) return true;
  }
  return false;
}

std::string what_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Layout

TEST(ReducerLayout, TinyNetReverseOrderFirstBucketSmall) {
  TinyNet net;
  const auto params = named_params(net).tensors;  // conv1.w, conv1.b, conv2.w, conv2.b, fc.w, fc.b
  const auto buckets = compute_bucket_layout(params, kTinyCap, kTinyFirstCap);
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].param_indices, (std::vector<size_t>{5}));     // 40 B: fc.w would pass 256
  EXPECT_EQ(buckets[1].param_indices, (std::vector<size_t>{4, 3}));  // 352 B: conv2.w would pass 1 KiB
  EXPECT_EQ(buckets[2].param_indices, (std::vector<size_t>{2}));     // 2304 B: alone, over the cap
  EXPECT_EQ(buckets[3].param_indices, (std::vector<size_t>{1, 0}));  // 896 B
  EXPECT_EQ(buckets[1].offsets, (std::vector<int64_t>{0, 80}));
  EXPECT_EQ(buckets[1].numel, 88);
  EXPECT_EQ(buckets[1].bytes, 352);
}

TEST(ReducerLayout, CapsRespectedAndEveryParameterOnceInReverseOrder) {
  torch::manual_seed(7);
  const auto sizes = torch::randint(1, 600, {200}, torch::kLong);
  std::vector<torch::Tensor> params;
  for (int64_t i = 0; i < sizes.size(0); ++i) params.push_back(torch::empty({sizes[i].item<int64_t>()}));
  const int64_t first_cap = 512, cap = 4096;
  const auto buckets = compute_bucket_layout(params, cap, first_cap);

  std::vector<size_t> order;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& spec = buckets[b];
    ASSERT_FALSE(spec.param_indices.empty());
    const int64_t limit = b == 0 ? first_cap : cap;
    EXPECT_TRUE(spec.bytes <= limit || spec.param_indices.size() == 1) << "bucket " << b << " " << spec.bytes << " B";
    int64_t numel = 0;
    for (size_t k = 0; k < spec.param_indices.size(); ++k) {
      EXPECT_EQ(spec.offsets[k], numel);
      numel += params[spec.param_indices[k]].numel();
    }
    EXPECT_EQ(spec.numel, numel);
    EXPECT_EQ(spec.bytes, numel * 4);
    // Closing early would waste collectives: the next parameter really did not fit.
    if (b + 1 < buckets.size()) {
      EXPECT_GT(spec.bytes + params[buckets[b + 1].param_indices.front()].numel() * 4, limit);
    }
    order.insert(order.end(), spec.param_indices.begin(), spec.param_indices.end());
  }
  std::vector<size_t> reversed(params.size());
  std::iota(reversed.rbegin(), reversed.rend(), size_t{0});
  EXPECT_EQ(order, reversed);
}

TEST(ReducerLayout, DefaultCapsGiveSmallFirstBucket) {
  // 64 parameters of 256 KiB each: 4 in the 1 MiB first bucket, then 100 per 25 MiB bucket.
  std::vector<torch::Tensor> params(64, torch::empty({64 * 1024}));
  const auto buckets = compute_bucket_layout(params, GradientReducer::kDefaultBucketCapBytes,
                                             GradientReducer::kDefaultFirstBucketCapBytes);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].bytes, 1024 * 1024);
  EXPECT_EQ(buckets[1].param_indices.size(), 60u);
}

TEST(ReducerLayout, BucketsHoldOneDtype) {
  const std::vector<torch::Tensor> params = {torch::empty({10}), torch::empty({10}, torch::kDouble), torch::empty({10}),
                                             torch::empty({10}, torch::kDouble)};
  const auto buckets = compute_bucket_layout(params, 1 << 20, 1 << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].param_indices, (std::vector<size_t>{3, 1}));
  EXPECT_EQ(buckets[1].param_indices, (std::vector<size_t>{2, 0}));
  EXPECT_EQ(buckets[0].bytes, 160);
}

TEST(ReducerLayout, RejectsNonPositiveCaps) {
  EXPECT_THROW(compute_bucket_layout({torch::empty({1})}, 0, 1), std::invalid_argument);
  EXPECT_THROW(compute_bucket_layout({torch::empty({1})}, 1, -1), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// One process, W pretend ranks

class ReducerFake : public ::testing::Test {
 protected:
  static constexpr int kWorld = 4;
  static constexpr int kSteps = 3;

  ReducerFake() : group(std::make_shared<RecordingProcessGroup>(kWorld)) {
    torch::manual_seed(0);
    net = std::make_shared<TinyNet>();
    params = named_params(*net);
    reducer = std::make_unique<GradientReducer>(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
  }

  // One training step's gradient work; returns the local gradients (what AccumulateGrad stored).
  std::vector<torch::Tensor> backward(int64_t seed) {
    clear_grads(params.tensors);
    poison(*reducer);
    const torch::Tensor loss = tiny_loss(*net, seed);
    group->in_backward = true;
    loss.backward();
    group->in_backward = false;
    return grads_of(params.tensors);
  }

  std::shared_ptr<RecordingProcessGroup> group;
  std::shared_ptr<TinyNet> net;
  NamedParams params;
  std::unique_ptr<GradientReducer> reducer;
};

TEST_F(ReducerFake, AveragedGradientsEqualLocalWhenRanksAgree) {
  ASSERT_TRUE(reducer->enabled());
  ASSERT_EQ(reducer->buckets().size(), 4u);
  for (int step = 0; step < kSteps; ++step) {
    const auto local = backward(100 + step);
    if (step == 1) clear_grads(params.tensors);  // finalize must define an undefined .grad
    reducer->finalize();
    for (size_t i = 0; i < local.size(); ++i) {
      ASSERT_TRUE(params.tensors[i].grad().defined()) << params.names[i];
      // Exact: g / 4 * 4 == g in binary floating point.
      EXPECT_TRUE(torch::equal(params.tensors[i].grad(), local[i])) << "step " << step << " " << params.names[i];
    }
  }
}

TEST_F(ReducerFake, EverySlotWrittenExactlyOncePerStep) {
  for (int step = 0; step < kSteps; ++step) {
    const auto local = backward(200 + step);
    reducer->finalize();
    // Poisoned before backward: NaN left over would mean a slot was missed, NaN at launch that a
    // bucket started before all its slots were written.
    EXPECT_FALSE(any_nan(reducer->bucket_buffers())) << "step " << step;
    const auto calls = std::vector<AllReduceCall>(group->all_reduces.end() - 4, group->all_reduces.end());
    for (const auto& call : calls) EXPECT_FALSE(call.had_nan) << "step " << step;
    // One collective per bucket per step; a second reduction of a slot would scale it by W again.
    EXPECT_EQ(group->all_reduces.size(), 4u * static_cast<size_t>(step + 1));
    for (size_t i = 0; i < local.size(); ++i) EXPECT_TRUE(torch::equal(params.tensors[i].grad(), local[i]));
  }
}

TEST_F(ReducerFake, BucketsLaunchInIndexOrderFirstBeforeBackwardEnds) {
  const size_t n_buckets = reducer->buckets().size();
  int64_t bucket_bytes = 0;
  for (const auto& spec : reducer->buckets()) bucket_bytes += spec.bytes;
  for (int step = 0; step < kSteps; ++step) {
    backward(300 + step);
    reducer->finalize();
    const ReducerStats& stats = reducer->last_stats();
    EXPECT_EQ(stats.launch_order, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(stats.num_params, 6);
    EXPECT_EQ(stats.bytes_reduced, bucket_bytes);
    EXPECT_GE(stats.finalize_wait_seconds, 0.0);
    // Communication starts while backward still has gradients to produce.
    EXPECT_LT(stats.hooks_fired_at_launch[0], stats.num_params);
    for (size_t b = 1; b < n_buckets; ++b)
      EXPECT_LE(stats.hooks_fired_at_launch[b - 1], stats.hooks_fired_at_launch[b]);
    EXPECT_EQ(stats.hooks_fired_at_launch.back(), stats.num_params);

    // The collectives themselves: same buffers, same sizes, same order every step.
    ASSERT_EQ(group->all_reduces.size(), n_buckets * static_cast<size_t>(step + 1));
    for (size_t b = 0; b < n_buckets; ++b) {
      const AllReduceCall& call = group->all_reduces[n_buckets * static_cast<size_t>(step) + b];
      EXPECT_EQ(call.numel, reducer->buckets()[b].numel);
      EXPECT_EQ(call.data, reducer->bucket_buffers()[b].data_ptr());
      EXPECT_TRUE(call.during_backward) << "bucket " << b << " waited for finalize()";
    }
  }
}

TEST_F(ReducerFake, WaitAtLaunchHoldsBackwardAtEachBucketAndAveragesAlike) {
  const size_t n_buckets = reducer->buckets().size();
  for (int step = 0; step < kSteps; ++step) {
    // The overlapped step, then the same backward with each bucket waited for at launch.
    reducer->set_wait_at_launch(false);
    backward(600 + step);
    reducer->finalize();
    const auto overlapped = grads_of(params.tensors);
    EXPECT_EQ(reducer->last_stats().buckets_waited_at_launch, 0);
    EXPECT_EQ(reducer->last_stats().launch_wait_seconds, 0.0);
    const size_t first = group->all_reduces.size();

    reducer->set_wait_at_launch(true);
    backward(600 + step);
    reducer->finalize();
    const ReducerStats& stats = reducer->last_stats();
    EXPECT_EQ(stats.launch_order, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(stats.buckets_waited_at_launch, static_cast<int64_t>(n_buckets));
    EXPECT_GE(stats.launch_wait_seconds, 0.0);
    ASSERT_EQ(group->all_reduces.size(), first + n_buckets);
    for (size_t b = 0; b < n_buckets; ++b) {
      const AllReduceCall& call = group->all_reduces[first + b];
      EXPECT_TRUE(call.during_backward) << "bucket " << b;
      // Waited for inside backward, before the next bucket was launched.
      EXPECT_TRUE(call.waited_during_backward) << "step " << step << " bucket " << b << " waited in finalize()";
      EXPECT_EQ(call.launched_when_waited, first + b + 1) << "step " << step << " bucket " << b;
    }
    for (size_t i = 0; i < overlapped.size(); ++i) {
      EXPECT_TRUE(torch::equal(params.tensors[i].grad(), overlapped[i])) << "step " << step << " " << params.names[i];
    }
  }
  // The overlapped mode waits in finalize(), after backward.
  reducer->set_wait_at_launch(false);
  const size_t first = group->all_reduces.size();
  backward(700);
  reducer->finalize();
  for (size_t b = 0; b < n_buckets; ++b) EXPECT_FALSE(group->all_reduces[first + b].waited_during_backward);
}

TEST_F(ReducerFake, DisabledReducerTouchesNothing) {
  reducer->set_enabled(false);
  const auto local = backward(400);
  reducer->finalize();
  EXPECT_TRUE(group->all_reduces.empty());
  for (size_t i = 0; i < local.size(); ++i) EXPECT_TRUE(torch::equal(params.tensors[i].grad(), local[i]));
  reducer->set_enabled(true);  // and back on for the next step
  backward(401);
  reducer->finalize();
  EXPECT_EQ(group->all_reduces.size(), 4u);
}

TEST_F(ReducerFake, DestroyedReducerLeavesNoHooks) {
  reducer.reset();
  clear_grads(params.tensors);
  tiny_loss(*net, 500).backward();  // a hook left behind would dereference the dead reducer
  EXPECT_TRUE(group->all_reduces.empty());
  EXPECT_FALSE(any_nan(grads_of(params.tensors)));
}

// Hooks fire once per backward, so "ready twice" means a second backward before finalize().
// See Note [Driving the all-reduces during backward].
std::vector<int64_t> progress_calls(const RecordingProcessGroup& group) {
  std::vector<int64_t> calls;
  for (const auto& work : group.works) calls.push_back(work->progress_calls());
  return calls;
}

TEST(ReducerProgress, LaunchedBucketsAreDrivenUntilFinalizeWhereTheBackendNeedsIt) {
  for (const bool needs : {true, false}) {
    auto group = std::make_shared<RecordingProcessGroup>(4);
    group->needs_progress = needs;
    torch::manual_seed(0);
    auto net = std::make_shared<TinyNet>();
    const NamedParams params = named_params(*net);
    GradientReducer reducer(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
    tiny_loss(*net, 1).backward();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // between backward and finalize
    const auto before_finalize = progress_calls(*group);
    reducer.finalize();
    const auto after_finalize = progress_calls(*group);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(before_finalize.size(), reducer.buckets().size());
    for (size_t b = 0; b < before_finalize.size(); ++b) {
      if (needs) {
        EXPECT_GT(before_finalize[b], 0) << "bucket " << b << " was not driven before finalize()";
      } else {
        EXPECT_EQ(after_finalize[b], 0) << "bucket " << b << ": this backend progresses by itself";
      }
    }
    EXPECT_EQ(progress_calls(*group), after_finalize) << "driven after finalize() (needs progress: " << needs << ")";
  }
}

// A work whose progress() throws: dropped, while the others are still driven until pause().
class CountingWork final : public Work {
 public:
  explicit CountingWork(bool throws) : throws_(throws) {}
  void wait() override {}
  void progress() override {
    ++calls;
    if (throws_) throw std::runtime_error("the collective failed");
  }
  std::atomic<int64_t> calls{0};

 private:
  bool throws_;
};

TEST(ReducerProgress, ThreadDropsAFailingWorkAndStopsAtPause) {
  ProgressThread thread(std::chrono::microseconds(100));
  auto failing = std::make_shared<CountingWork>(true), healthy = std::make_shared<CountingWork>(false);
  thread.add(failing);
  thread.add(healthy);
  while (healthy->calls.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  thread.pause();
  EXPECT_EQ(failing->calls.load(), 1);
  const int64_t at_pause = healthy->calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(healthy->calls.load(), at_pause);
  EXPECT_GE(thread.passes(), 20);
}

TEST(ReducerErrors, MarkedReadyTwiceThrowsNamingParameter) {
  const torch::Tensor w = torch::ones({3}, torch::requires_grad());
  GradientReducer reducer({w}, std::make_shared<RecordingProcessGroup>(2), kTinyCap, kTinyFirstCap, {"head.w"});
  (w * 2).sum().backward();
  const std::string message = what_of([&] { (w * 3).sum().backward(); });
  EXPECT_NE(message.find("parameter 0 ('head.w')"), std::string::npos) << message;
  EXPECT_NE(message.find("ready twice"), std::string::npos) << message;
}

TEST(ReducerErrors, ParameterUsedTwiceInOneGraphIsReadyOnce) {
  const torch::Tensor w = torch::ones({3}, torch::requires_grad());
  GradientReducer reducer({w}, std::make_shared<RecordingProcessGroup>(2), kTinyCap, kTinyFirstCap, {"w"});
  ((w * 2).sum() + (w * w).sum()).backward();
  reducer.finalize();
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 4.0f)));
}

TEST(ReducerErrors, ParameterWithoutGradientThrowsNamingIt) {
  torch::manual_seed(0);
  TinyNet net;
  auto params = named_params(net);
  params.tensors.push_back(torch::zeros({5}, torch::requires_grad()));
  params.names.push_back("extra.unused");
  auto group = std::make_shared<RecordingProcessGroup>(2);
  GradientReducer reducer(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
  tiny_loss(net, 1).backward();
  const std::string message = what_of([&] { reducer.finalize(); });
  EXPECT_NE(message.find("parameter 6 ('extra.unused')"), std::string::npos) << message;
  EXPECT_EQ(message.find("conv1"), std::string::npos) << message;
}

TEST(ReducerErrors, RejectsParametersItCannotHook) {
  auto group = std::make_shared<RecordingProcessGroup>(2);
  const torch::Tensor leaf = torch::ones({2}, torch::requires_grad());
  EXPECT_THROW(GradientReducer({torch::ones({2})}, group), std::invalid_argument);  // no grad
  EXPECT_THROW(GradientReducer({leaf * 2}, group), std::invalid_argument);          // not a leaf
  EXPECT_THROW(GradientReducer({leaf, leaf}, group), std::invalid_argument);        // duplicate
  EXPECT_THROW(GradientReducer({leaf}, group, 1024, 256, {"a", "b"}), std::invalid_argument);
}

TEST(ReducerErrors, WorldOfOneIsAFreeNoOp) {
  const torch::Tensor w = torch::ones({3}, torch::requires_grad());
  GradientReducer reducer({w}, std::make_shared<LocalProcessGroup>());
  EXPECT_FALSE(reducer.enabled());
  EXPECT_TRUE(reducer.bucket_buffers().empty());  // nothing allocated, no hooks registered
  (w * 2).sum().backward();
  (w * 2).sum().backward();  // not an error: nothing is tracked
  reducer.finalize();
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({3}, 4.0f)));
}

// ---------------------------------------------------------------------------------------------
// broadcast_parameters

TEST(ReducerBroadcast, OneCollectivePerDtypeAndEveryElementCopiedBack) {
  RecordingProcessGroup group(/*world=*/4, /*rank=*/2);
  const std::vector<torch::Tensor> tensors = {
      torch::arange(6, torch::kFloat).reshape({2, 3}).clone().requires_grad_(),  // a parameter
      torch::arange(4, torch::kLong),                                            // a buffer, e.g. a counter
      torch::arange(5, torch::kFloat).requires_grad_(),
      torch::arange(3, torch::kDouble),
      torch::arange(6, torch::kFloat).reshape({3, 2}).t(),  // not contiguous
  };
  std::vector<torch::Tensor> before;
  for (const auto& t : tensors) before.push_back(t.detach().clone());
  broadcast_parameters(tensors, group);
  ASSERT_EQ(group.broadcasts.size(), 3u);
  EXPECT_EQ(group.broadcasts[0].numel, 17);
  EXPECT_EQ(group.broadcasts[0].dtype, torch::kFloat);
  EXPECT_EQ(group.broadcasts[1].dtype, torch::kLong);
  EXPECT_EQ(group.broadcasts[2].dtype, torch::kDouble);
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(torch::equal(tensors[i].detach(), before[i] + 1)) << i;
}

// A model's flat buffers (Note [Flat buffers] in model/flat_tensors.h), one per dtype: the collective
// writes each in place, with no gathering copy and no copy back.
TEST(ReducerBroadcast, TheOnlyContiguousTensorOfItsDtypeTravelsInPlace) {
  RecordingProcessGroup group(/*world=*/4, /*rank=*/1);
  const std::vector<torch::Tensor> flats = {torch::arange(300, torch::kFloat), torch::arange(7, torch::kLong)};
  broadcast_parameters(flats, group);
  ASSERT_EQ(group.broadcasts.size(), 2u);
  for (size_t i = 0; i < flats.size(); ++i) {
    EXPECT_EQ(group.broadcasts[i].data, flats[i].data_ptr()) << i;
    EXPECT_TRUE(torch::equal(flats[i], torch::arange(flats[i].numel(), flats[i].scalar_type()) + 1)) << i;
  }
}

TEST(ReducerBroadcast, RootKeepsItsValues) {
  RecordingProcessGroup group(/*world=*/4, /*rank=*/0);
  const torch::Tensor t = torch::arange(4, torch::kFloat);
  broadcast_parameters({t}, group);
  EXPECT_TRUE(torch::equal(t, torch::arange(4, torch::kFloat)));
}

// ---------------------------------------------------------------------------------------------
// The job's real group (world size 1 under ctest, N under mpirun)

TEST(ReducerWorld, BroadcastMakesEveryRankHoldRootsParameters) {
  auto group = test_world_group();
  if (group->world_size() == 1)
    GTEST_SKIP() << "a broadcast to oneself proves nothing: needs several ranks (ctest's mpi.np2 and mpi.np4 run it)";
  torch::manual_seed(1000 + group->rank());  // rank-dependent initial weights
  TinyNet net;
  const auto params = named_params(net).tensors;
  broadcast_parameters(params, *group);
  for (const auto& p : params) {
    const torch::Tensor gathered = group->all_gather(p.detach().reshape({1, -1}));
    for (int r = 0; r < group->world_size(); ++r) EXPECT_TRUE(torch::equal(gathered[r], gathered[0]));
  }
}

TEST(ReducerWorld, GradientsAreTheMeanOverRanks) {
  auto group = test_world_group();
  torch::manual_seed(0);
  TinyNet net;
  const auto params = named_params(net);
  broadcast_parameters(params.tensors, *group);
  GradientReducer reducer(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
  reducer.set_enabled(true);  // the full path even at world size 1

  for (int step = 0; step < 2; ++step) {
    // Reference: plain local backward, then one blocking all-reduce per gradient.
    reducer.set_enabled(false);
    clear_grads(params.tensors);
    tiny_loss(net, 10 * step + group->rank()).backward();  // every rank sees different data
    const auto expected = mean_over_ranks(grads_of(params.tensors), *group);

    reducer.set_enabled(true);
    clear_grads(params.tensors);
    tiny_loss(net, 10 * step + group->rank()).backward();
    reducer.finalize();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params.tensors[i].grad(), expected[i], /*rtol=*/1e-5, /*atol=*/1e-7))
          << "step " << step << " " << params.names[i];
    }
    EXPECT_EQ(reducer.last_stats().launch_order.size(), reducer.buckets().size());
  }
}

// optim.micro_batch: three backward passes, the first two accumulated locally (DDP's no_sync), the
// third averaged with them: one finalize gives the mean over ranks of each rank's sum of the three,
// as one all-reduce of the summed gradients does; the held passes start no collective.
TEST(ReducerWorld, AccumulatedPassesAreAveragedOnceWithTheLast) {
  auto group = test_world_group();
  torch::manual_seed(0);
  TinyNet net;
  const auto params = named_params(net);
  broadcast_parameters(params.tensors, *group);
  GradientReducer reducer(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
  const auto seed = [&](int pass) { return 100 * pass + group->rank(); };
  for (int step = 0; step < 2; ++step) {
    reducer.set_enabled(false);
    clear_grads(params.tensors);
    for (int pass = 0; pass < 3; ++pass) tiny_loss(net, seed(pass)).backward();
    const auto expected = mean_over_ranks(grads_of(params.tensors), *group);

    reducer.set_enabled(true);
    clear_grads(params.tensors);
    reducer.accumulate_locally(true);
    for (int pass = 0; pass < 2; ++pass) tiny_loss(net, seed(pass)).backward();
    reducer.accumulate_locally(false);
    tiny_loss(net, seed(2)).backward();
    reducer.finalize();
    EXPECT_EQ(reducer.last_stats().launch_order.size(), reducer.buckets().size()) << "one collective per bucket";
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params.tensors[i].grad(), expected[i], /*rtol=*/1e-5, /*atol=*/1e-7))
          << "step " << step << " " << params.names[i];
    }
    // The next step is a plain one again: its average is of its own backward only, whatever
    // param.grad held before (here that backward's gradient, left by a pass without the reducer).
    reducer.set_enabled(false);
    clear_grads(params.tensors);
    tiny_loss(net, seed(7)).backward();
    const auto mean = mean_over_ranks(grads_of(params.tensors), *group);
    reducer.set_enabled(true);
    tiny_loss(net, seed(7)).backward();
    reducer.finalize();
    for (size_t i = 0; i < mean.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params.tensors[i].grad(), mean[i], 1e-5, 1e-7)) << "plain step " << params.names[i];
    }
  }
}

// bench_dist's no-overlap step: waiting for each bucket at launch averages the same, bit for bit.
TEST(ReducerWorld, WaitAtLaunchGivesTheOverlappedAveragesBitForBit) {
  auto group = test_world_group();
  torch::manual_seed(0);
  TinyNet net;
  const auto params = named_params(net);
  broadcast_parameters(params.tensors, *group);
  GradientReducer reducer(params.tensors, group, kTinyCap, kTinyFirstCap, params.names);
  reducer.set_enabled(true);  // the full path even at world size 1
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<torch::Tensor>> averaged;
    for (const bool wait : {false, true}) {
      reducer.set_wait_at_launch(wait);
      clear_grads(params.tensors);
      tiny_loss(net, 10 * step + group->rank()).backward();  // every rank sees different data
      reducer.finalize();
      averaged.push_back(grads_of(params.tensors));
      EXPECT_EQ(reducer.last_stats().buckets_waited_at_launch, wait ? 4 : 0);
    }
    for (size_t i = 0; i < params.tensors.size(); ++i)
      EXPECT_TRUE(torch::equal(averaged[0][i], averaged[1][i])) << "step " << step << " " << params.names[i];
  }
}

// See Note [Layout agreed once]: the buckets skip the per-call check, so a rank whose model differs
// must be named when the reducer is made, on every rank, and the group must stay usable.
TEST(ReducerWorld, ARankWithAnotherLayoutIsNamedWhenTheReducerIsMade) {
  auto group = test_world_group();
  if (group->world_size() == 1) GTEST_SKIP() << "needs several ranks (ctest's mpi.np2 and mpi.np4 run it)";
  const auto ten = torch::zeros({10}, torch::requires_grad()), three = torch::zeros({3}, torch::requires_grad());
  std::vector<torch::Tensor> params =
      group->rank() == 1 ? std::vector<torch::Tensor>{ten, three} : std::vector<torch::Tensor>{ten};
  try {
    GradientReducer reducer(params, group);
    ADD_FAILURE() << "no error although rank 1 has another parameter";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 differ from rank 0's"), std::string::npos) << e.what();
  }
  group->barrier();  // still usable
}

// Channels-last weights get channels-last bucket views: the gradient goes in and the average comes
// out without a permuting copy (same strides both ways), and the average is still exact.
TEST(ReducerMemoryFormat, ChannelsLastWeightsGetViewsWithTheirStrides) {
  torch::manual_seed(3);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).bias(true));
  {
    torch::NoGradGuard no_grad;
    conv->weight.set_data(conv->weight.contiguous(torch::MemoryFormat::ChannelsLast));
  }
  ASSERT_FALSE(conv->weight.is_contiguous());
  const std::vector<torch::Tensor> params = {conv->weight, conv->bias};
  auto group = std::make_shared<RecordingProcessGroup>(4);
  GradientReducer reducer(params, group);
  const auto input = torch::randn({2, 3, 6, 6}).contiguous(torch::MemoryFormat::ChannelsLast);
  conv->forward(input).pow(2).sum().backward();
  const auto local = grads_of(params);
  reducer.finalize();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto view = reducer.gradient_view(i);
    ASSERT_TRUE(view.defined());
    EXPECT_EQ(view.sizes(), params[i].sizes()) << i;
    EXPECT_EQ(view.strides(), params[i].strides()) << i;
    EXPECT_EQ(params[i].grad().strides(), params[i].strides()) << i;
    EXPECT_TRUE(torch::equal(params[i].grad(), local[i])) << i;
  }
}

}  // namespace
}  // namespace moco::dist
