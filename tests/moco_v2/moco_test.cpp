#include "moco_v2/batch_shuffle.h"
#include "moco_v2/contrastive.h"
#include "moco_v2/moco.h"
#include "model/nonfinite.h"
#include "run/device.h"
#include "optim/sgd.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <optional>

using namespace moco;
namespace F = torch::nn::functional;

namespace {

// A handle on a tensor's grad_fn() that does not keep the graph alive. LibTorch 2.13 made autograd
// nodes intrusive_ptr's (grad_fn() was a std::shared_ptr before).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
using WeakNode = c10::weak_intrusive_ptr<torch::autograd::Node>;
#else
using WeakNode = std::weak_ptr<torch::autograd::Node>;
#endif

model::ResNetOptions tiny_encoder() {
  auto o = model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  o.width = 0.125;
  o.out_dim = 16;
  return o;
}

moco_v2::Moco make_moco(int64_t queue_size, double momentum = 0.99) {
  moco_v2::MocoOptions options;
  options.queue_size = queue_size;
  options.momentum = momentum;
  options.temperature = 0.2;
  moco_v2::Moco m(tiny_encoder(), options, std::make_shared<dist::LocalProcessGroup>(), /*seed=*/1);
  m->train();
  return m;
}

torch::Tensor unit_rows(const torch::Tensor& x) { return F::normalize(x, F::NormalizeFuncOptions().dim(1)); }

bool same_tensor(const torch::Tensor& a, const torch::Tensor& b) {
  return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

// The mistake MoCo re-implementations make: the queue keeps queries with their graph.
struct NaiveQueueStep {
  torch::nn::Sequential encoder{torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3)};
  torch::Tensor queue = unit_rows(torch::randn({5, 3}));  // rows are entries here

  void step(bool retain_graph) {
    auto q = unit_rows(encoder->forward(torch::randn({2, 4})));
    auto logits = torch::mm(q, queue.t()) / 0.2;
    auto loss = F::cross_entropy(logits, torch::zeros({2}, torch::kLong));
    for (auto& p : encoder->parameters()) p.mutable_grad() = torch::Tensor();
    loss.backward({}, retain_graph);
    // The update as PyTorch's optimizers do it: in place, bumping the version counters. (LibTorch's
    // SGD writes through .data(), which hides the bump: a stale graph then silently computes with
    // the new weights instead of raising.)
    {
      torch::NoGradGuard no_grad;
      for (auto& p : encoder->parameters()) p.sub_(0.1 * p.grad());
    }
    queue = torch::cat({q, queue.narrow(0, 0, 3)});  // q is not detached: its graph rides along
  }
};

using moco::test::error_of;

}  // namespace

TEST(SeedErrorsTest, QueueThatKeepsQueryGraphsBreaksOnTheSecondBackward) {
  torch::manual_seed(0);
  NaiveQueueStep naive;
  naive.step(false);
  const auto message = error_of([&] { naive.step(false); });
  EXPECT_NE(message.find("Trying to backward through the graph a second time"), std::string::npos) << message;
}

TEST(SeedErrorsTest, RetainGraphTurnsItIntoTheInplaceError) {
  torch::manual_seed(0);
  NaiveQueueStep naive;
  naive.step(true);
  const auto message = error_of([&] { naive.step(true); });
  EXPECT_NE(message.find("modified by an inplace operation"), std::string::npos) << message;
}

TEST(SeedErrorsTest, NaiveQueueKeepsTheGraphAlive) {
  // The liveness probe used below does detect a kept graph.
  torch::manual_seed(0);
  NaiveQueueStep naive;
  naive.step(true);
  WeakNode node(naive.queue.grad_fn());
  EXPECT_FALSE(node.expired());
}

TEST(MocoTest, TwoHundredPlainBackwardStepsLeaveNoGraphBehind) {
  torch::manual_seed(0);
  auto moco = make_moco(/*queue_size=*/100);
  torch::optim::SGD optimizer(moco->trainable_parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  int64_t resident_after_warmup = 0;
  for (int step = 0; step < 200; ++step) {
    std::optional<WeakNode> loss_node, query_node;  // set once the step has its graph
    {
      auto out = moco->forward(torch::randn({32, 1, 16, 16}), torch::randn({32, 1, 16, 16}));
      loss_node.emplace(out.loss.grad_fn());
      query_node.emplace(out.q.grad_fn());
      ASSERT_FALSE(loss_node->expired());
      optimizer.zero_grad();
      ASSERT_NO_THROW(out.loss.backward());
      moco->end_step(out);
      optimizer.step();
      ASSERT_TRUE(std::isfinite(out.loss.item<double>()));
    }
    ASSERT_TRUE(loss_node->expired()) << "step " << step << " left its loss graph alive";
    ASSERT_TRUE(query_node->expired()) << "step " << step << " left its query graph alive";
    ASSERT_FALSE(moco->queue().requires_grad());
    ASSERT_FALSE(moco->queue().grad_fn());
    if (step == 49) resident_after_warmup = resident_bytes();
  }
  // A kept graph would hold every step's activations (~2 MB a step here, ~300 MB over 150 steps).
  EXPECT_LT(resident_bytes() - resident_after_warmup, 32 << 20);
}

TEST(MocoTest, QueueHoldsTheLastKeysInOrderAcrossTheWrap) {
  torch::manual_seed(0);
  const int64_t K = 20, batch = 6;  // K is no multiple of the batch: the third step wraps
  auto moco = make_moco(K);
  auto expected = moco->queue().clone();
  int64_t ptr = 0;
  for (int step = 0; step < 5; ++step) {
    const auto im_q = torch::randn({batch, 1, 8, 8});
    const auto im_k = torch::randn({batch, 1, 8, 8});
    auto out = moco->forward(im_q, im_k);
    moco->end_step(out);
    torch::Tensor recomputed_k, recomputed_q;
    {
      torch::NoGradGuard no_grad;  // train-mode BN uses the batch: the same output again
      recomputed_k = unit_rows(moco->encoder_k->forward(im_k));
      recomputed_q = unit_rows(moco->encoder_q->forward(im_q));
    }
    EXPECT_TRUE(torch::allclose(out.k, recomputed_k, 1e-6, 1e-6));
    for (int64_t i = 0; i < batch; ++i) expected.select(1, (ptr + i) % K).copy_(out.k[i]);
    ptr = (ptr + batch) % K;
    EXPECT_TRUE(torch::equal(moco->queue(), expected)) << "step " << step;
    EXPECT_EQ(moco->queue_pointer(), ptr);
    EXPECT_FALSE(moco->queue().requires_grad());
    EXPECT_FALSE(moco->queue().grad_fn());
    // Keys, not queries.
    const auto newest = moco->queue().index_select(1, torch::arange(ptr - batch, ptr).remainder(K)).t();
    EXPECT_FALSE(torch::allclose(newest, recomputed_q, 1e-3, 1e-3));
  }
}

// Shuffle-BN on one device, against a plain loop: the key batch is permuted by the step's shared
// permutation, the key encoder runs on it (BN groups then mix samples), and key j must be the
// encoder's output for sample j, found at the row the permutation moved it to.
TEST(MocoTest, ShuffledKeysComeBackToTheirSamples) {
  torch::manual_seed(0);
  auto encoder = tiny_encoder();
  encoder.bn_splits = 2;
  moco_v2::MocoOptions options;
  options.queue_size = 64;
  options.temperature = 0.2;
  const uint64_t seed = 3;
  moco_v2::Moco moco(encoder, options, std::make_shared<dist::LocalProcessGroup>(), seed);
  moco->train();
  const int64_t n = 8;
  for (int64_t step = 0; step < 3; ++step) {
    const auto im_q = torch::randn({n, 1, 8, 8});
    const auto im_k = torch::randn({n, 1, 8, 8});
    auto out = moco->forward(im_q, im_k);
    moco->end_step(out);
    const auto perm = moco_v2::shared_permutation(n, seed, step);
    auto shuffled = torch::empty_like(im_k);
    for (int64_t i = 0; i < n; ++i) shuffled[i].copy_(im_k[perm[i]]);  // row i holds sample perm[i]
    torch::Tensor encoded;
    {
      torch::NoGradGuard no_grad;  // train-mode BN uses the batch: the same output again
      encoded = unit_rows(moco->encoder_k->forward(shuffled));
    }
    auto expected = torch::empty_like(encoded);
    for (int64_t i = 0; i < n; ++i) expected[perm[i]].copy_(encoded[i]);
    EXPECT_TRUE(torch::allclose(out.k, expected, 1e-5, 1e-5))
        << "step " << step << ": max difference " << (out.k - expected).abs().max().item<double>();
    // And the split mattered: the same batch unshuffled gives other keys.
    torch::Tensor unshuffled;
    {
      torch::NoGradGuard no_grad;
      unshuffled = unit_rows(moco->encoder_k->forward(im_k));
    }
    EXPECT_FALSE(torch::allclose(out.k, unshuffled, 1e-3, 1e-3)) << "step " << step;
  }
}

TEST(MocoTest, KeyEncoderGetsNoGradientAndMovesOnlyByMomentum) {
  torch::manual_seed(0);
  const double m = 0.9;
  auto moco = make_moco(64, m);
  torch::optim::SGD optimizer(moco->trainable_parameters(), torch::optim::SGDOptions(0.5));
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      for (const auto& k : moco->encoder_k->parameters()) EXPECT_FALSE(same_tensor(p, k));

  // One optimizer step first, so that q and k differ.
  for (int step = 0; step < 2; ++step) {
    std::vector<torch::Tensor> q_before, k_before;
    for (const auto& p : moco->encoder_q->parameters()) q_before.push_back(p.detach().clone());
    for (const auto& p : moco->encoder_k->parameters()) k_before.push_back(p.detach().clone());
    auto out = moco->forward(torch::randn({8, 1, 8, 8}), torch::randn({8, 1, 8, 8}));
    const auto k_params = moco->encoder_k->parameters();
    for (size_t i = 0; i < k_params.size(); ++i) {
      EXPECT_TRUE(torch::equal(k_params[i], k_before[i].mul(m).add(q_before[i], 1 - m))) << i;
    }
    optimizer.zero_grad();
    out.loss.backward();
    moco->end_step(out);
    optimizer.step();
    for (const auto& k : moco->encoder_k->parameters()) {
      EXPECT_FALSE(k.requires_grad());
      EXPECT_FALSE(k.grad().defined());
    }
    bool q_moved = false;
    const auto q_params = moco->encoder_q->parameters();
    for (size_t i = 0; i < q_params.size(); ++i) q_moved |= !torch::equal(q_params[i], q_before[i]);
    EXPECT_TRUE(q_moved);
  }
}

// use_channels_last after the model was made gives every 4-D weight new storage: both encoders'
// flat buffers bind them again in their new memory order (Note [Flat buffers]) and k still moves
// by exactly m*k + (1-m)*q.
TEST(MocoTest, EncodersMadeChannelsLastLaterStillMoveOnlyByMomentum) {
  torch::manual_seed(0);
  const double m = 0.9;
  auto moco = make_moco(64, m);
  for (auto& p : moco->encoder_q->parameters()) {
    torch::NoGradGuard no_grad;
    p.add_(torch::randn_like(p));  // q and k differ
  }
  run::use_channels_last(*moco);
  std::vector<torch::Tensor> q_before, k_before;
  for (const auto& p : moco->encoder_q->parameters()) q_before.push_back(p.detach().clone());
  for (const auto& p : moco->encoder_k->parameters()) k_before.push_back(p.detach().clone());
  const auto version = moco->encoder_k->parameters()[0]._version();
  moco->momentum_update();
  const auto k_params = moco->encoder_k->parameters();
  EXPECT_GT(k_params[0]._version(), version) << "autograd sees the update, as an in-place op on k";
  for (size_t i = 0; i < k_params.size(); ++i) {
    EXPECT_TRUE(torch::equal(k_params[i], k_before[i].mul(m).add(q_before[i], 1 - m))) << i;
    if (k_params[i].dim() == 4) {
      EXPECT_TRUE(k_params[i].is_contiguous(torch::MemoryFormat::ChannelsLast)) << i;
    }
  }
}

TEST(MocoTest, EncodersInDifferentMemoryOrdersAreRefused) {
  auto moco = make_moco(64);
  run::use_channels_last(*moco->encoder_q);
  EXPECT_THROW(moco->momentum_update(), std::logic_error);
}

TEST(MocoTest, KeyEncoderStartsAsACopyOfTheQueryEncoder) {
  auto moco = make_moco(64);
  const auto q = moco->encoder_q->named_parameters();
  const auto k = moco->encoder_k->named_parameters();
  ASSERT_EQ(q.size(), k.size());
  for (const auto& item : q) EXPECT_TRUE(torch::equal(item.value(), k[item.key()])) << item.key();
  for (const auto& item : moco->encoder_q->named_buffers())
    EXPECT_TRUE(torch::equal(item.value(), moco->encoder_k->named_buffers()[item.key()])) << item.key();
}

// q and k are the encoders' outputs scaled to unit length, and the logits are computed by hand from
// them: the positive q.k in column 0, then q against every queue column, all divided by T.
TEST(MocoTest, QueriesAndKeysAreUnitOutputsOfTheEncodersAndLogitsFollowByHand) {
  torch::manual_seed(0);
  auto moco = make_moco(8);
  const auto queue_before = moco->queue().clone();
  const auto im_q = torch::randn({4, 1, 8, 8}), im_k = torch::randn({4, 1, 8, 8});
  auto out = moco->forward(im_q, im_k);
  moco->end_step(out);
  torch::Tensor raw_q, raw_k;
  {
    torch::NoGradGuard no_grad;  // train-mode BN uses the batch: the same output again
    raw_q = moco->encoder_q->forward(im_q);
    raw_k = moco->encoder_k->forward(im_k);
  }
  EXPECT_GT((raw_q.norm(2, 1) - 1).abs().max().item<double>(), 1e-2);  // normalising is not a no-op here
  EXPECT_TRUE(torch::allclose(out.q, raw_q / raw_q.norm(2, 1, true), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(out.k, raw_k / raw_k.norm(2, 1, true), 1e-5, 1e-6));
  auto expected = torch::empty({4, 9});
  for (int64_t i = 0; i < 4; ++i) {
    expected[i][0] = (out.q[i] * out.k[i]).sum() / 0.2;
    for (int64_t j = 0; j < 8; ++j) expected[i][1 + j] = (out.q[i] * queue_before.select(1, j)).sum() / 0.2;
  }
  EXPECT_NEAR(out.loss.item<double>(), moco_v2::contrastive_loss(expected).item<double>(), 1e-5);
  EXPECT_TRUE(torch::equal(out.positive_rank, expected.narrow(1, 1, 8).gt(expected.narrow(1, 0, 1)).sum(1)));
}

TEST(MocoTest, LogitsUseTheQueueAsItWasBeforeTheEnqueue) {
  torch::manual_seed(0);
  auto moco = make_moco(32);
  const auto queue_before = moco->queue().clone();
  auto out = moco->forward(torch::randn({4, 1, 8, 8}), torch::randn({4, 1, 8, 8}));
  moco->end_step(out);
  torch::NoGradGuard no_grad;
  const auto logits = moco_v2::contrastive_logits(out.q, out.k, queue_before, 0.2);
  EXPECT_NEAR(out.loss.item<double>(), moco_v2::contrastive_loss(logits).item<double>(), 1e-6);
  EXPECT_GT(
      std::abs(moco_v2::contrastive_loss(moco_v2::contrastive_logits(out.q, out.k, moco->queue(), 0.2)).item<double>() -
               out.loss.item<double>()),
      1e-4);  // the queue after the enqueue would give another loss
  EXPECT_FALSE(torch::equal(moco->queue(), queue_before));
}

// The fused loss against the plain composition it replaces, on random unit vectors of several
// shapes and temperatures: the loss, dL/dq under a random upstream gradient, and the positive's rank.
// The fused loss makes its gradient in the forward; the queue is overwritten between forward and
// backward here, as the enqueue does in training, and must not change that gradient.
TEST(ContrastiveTest, FusedLossAndGradientEqualThePlainComposition) {
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  const std::vector<std::tuple<int64_t, int64_t, int64_t, double>> cases = {
      {1, 4, 1, 0.07},
      {5, 3, 17, 0.2},
      {64, 128, 1024, 0.07},
      {33, 16, 300, 1.0},
      {16, 4, 64, 0.005}};  // at T = 0.005 some positives' softmax underflows: the loss must stay exact
  for (const auto& [n, dim, K, T] : cases) {
    const auto unit = F::NormalizeFuncOptions().dim(1);
    const auto q0 = F::normalize(torch::randn({n, dim}, torch::kDouble), unit).to(torch::kFloat);
    const auto k = F::normalize(torch::randn({n, dim}), unit);
    const auto queue = F::normalize(torch::randn({dim, K}), F::NormalizeFuncOptions().dim(0));
    const auto upstream = torch::rand({}) + 0.5;

    auto q_plain = q0.clone().requires_grad_(true);
    const auto logits = moco_v2::contrastive_logits(q_plain, k, queue, T);
    const auto plain = moco_v2::contrastive_loss(logits);
    (plain * upstream).backward();

    auto q_fused = q0.clone().requires_grad_(true);
    auto queue_to_overwrite = queue.clone();
    const auto fused = moco_v2::fused_contrastive_loss(q_fused, k, queue_to_overwrite, T);
    queue_to_overwrite.normal_();
    (fused.loss * upstream).backward();

    const std::string where = "n=" + std::to_string(n) + " dim=" + std::to_string(dim) + " K=" + std::to_string(K);
    EXPECT_NEAR(fused.loss.item<double>(), plain.item<double>(), 1e-5 * std::max(1.0, plain.item<double>())) << where;
    EXPECT_TRUE(torch::allclose(q_fused.grad(), q_plain.grad(), 1e-4, 1e-6))
        << where << "\n"
        << (q_fused.grad() - q_plain.grad()).abs().max().item<double>();
    const auto l = logits.detach();
    EXPECT_TRUE(torch::equal(fused.positive_rank, l.narrow(1, 1, K).gt(l.narrow(1, 0, 1)).sum(1))) << where;
  }
}

TEST(ContrastiveTest, FusedLossRefusesAKeyOrQueueThatWantsAGradient) {
  const auto q = torch::randn({2, 4}, torch::requires_grad());
  EXPECT_THROW(
      moco_v2::fused_contrastive_loss(q, torch::randn({2, 4}, torch::requires_grad()), torch::randn({4, 3}), 0.2),
      std::invalid_argument);
  EXPECT_THROW(
      moco_v2::fused_contrastive_loss(q, torch::randn({2, 4}), torch::randn({4, 3}, torch::requires_grad()), 0.2),
      std::invalid_argument);
}

TEST(ContrastiveTest, LogitsAndLossEqualAHandComputation) {
  // dim 2, batch 2, K 3; the vectors are unit length.
  const auto q = torch::tensor({{1.0f, 0.0f}, {0.0f, 1.0f}});
  const auto k = torch::tensor({{0.6f, 0.8f}, {1.0f, 0.0f}});
  const auto queue = torch::tensor({{1.0f, 0.0f, 0.6f}, {0.0f, 1.0f, -0.8f}});
  const double T = 0.5;
  // Row 0: q.k = 0.6, q.queue = (1, 0, 0.6); row 1: q.k = 0, q.queue = (0, 1, -0.8); all / T.
  const std::vector<std::vector<double>> hand = {{1.2, 2.0, 0.0, 1.2}, {0.0, 0.0, 2.0, -1.6}};
  const auto logits = moco_v2::contrastive_logits(q, k, queue, T);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 4}));
  double loss = 0;
  for (int i = 0; i < 2; ++i) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(logits[i][j].item<double>(), hand[i][j], 1e-6);
      sum += std::exp(hand[i][j]);
    }
    loss += (std::log(sum) - hand[i][0]) / 2;  // -log softmax of the positive, averaged
  }
  EXPECT_NEAR(moco_v2::contrastive_loss(logits).item<double>(), loss, 1e-6);
}

TEST(ContrastiveTest, EnqueueWrapsAndRefusesMoreKeysThanTheQueueHolds) {
  auto queue = torch::zeros({2, 5});
  auto ptr = torch::full({1}, 3, torch::kLong);
  const auto keys = torch::arange(1, 9, torch::kFloat).view({4, 2});  // key i = (2i+1, 2i+2)
  moco_v2::enqueue_keys(queue, ptr, keys);
  EXPECT_EQ(ptr.item<int64_t>(), 2);
  // Columns 3, 4, 0, 1 receive keys 0..3; column 2 is untouched.
  const auto expected = torch::tensor({{5.0f, 7.0f, 0.0f, 1.0f, 3.0f}, {6.0f, 8.0f, 0.0f, 2.0f, 4.0f}});
  EXPECT_TRUE(torch::equal(queue, expected));
  EXPECT_THROW(moco_v2::enqueue_keys(queue, ptr, torch::zeros({6, 2})), std::invalid_argument);
}

// A step skipped on the device (Note [Skipping a step on the device]) writes nothing: the same
// queue and pointer; with `apply` true, the same as without it.
TEST(ContrastiveTest, EnqueueKeepsQueueAndPointerWhereNotApplied) {
  const auto keys = torch::randn({3, 2});
  auto queue = torch::randn({2, 5});
  auto ptr = torch::full({1}, 4, torch::kLong);
  const auto queue_before = queue.clone();
  moco_v2::enqueue_keys(queue, ptr, keys, torch::tensor(false));
  EXPECT_TRUE(torch::equal(queue, queue_before));
  EXPECT_EQ(ptr.item<int64_t>(), 4);
  auto plain = queue.clone();
  auto plain_ptr = ptr.clone();
  moco_v2::enqueue_keys(plain, plain_ptr, keys);
  moco_v2::enqueue_keys(queue, ptr, keys, torch::tensor(true));
  EXPECT_TRUE(torch::equal(queue, plain));
  EXPECT_EQ(ptr.item<int64_t>(), 2);
  EXPECT_EQ(plain_ptr.item<int64_t>(), 2);
}

// Note [Skipping a step on the device]. A training step as MocoV2::step makes it: forward, backward,
// the gradients checked before anything is kept, end_step, the SGD step with `trained`.
namespace {

enum class Poison { kNone, kQueries, kKeys, kLoss, kGradients };

moco_v2::MocoOutput train_step(moco_v2::Moco& moco, optim::MomentumSgd& sgd, Poison poison = Poison::kNone) {
  auto im_q = torch::randn({6, 1, 8, 8}), im_k = torch::randn({6, 1, 8, 8});
  if (poison == Poison::kQueries) im_q[2][0][3][3] = std::nan("");
  if (poison == Poison::kKeys) im_k[1][0][2][2] = std::numeric_limits<float>::infinity();
  auto out = moco->forward(im_q, im_k);
  if (poison == Poison::kLoss) out.loss = out.loss + std::nan("");
  if (poison == Poison::kGradients)  // one Inf in the gradient that reaches one query
    out.q.register_hook([](const torch::Tensor& g) {
      auto poisoned = g.clone();
      poisoned[0][0] = std::numeric_limits<float>::infinity();
      return poisoned;
    });
  sgd.zero_grad();
  out.loss.backward();
  moco->end_step(out, sgd.nonfinite_gradients());
  sgd.step(out.trained);
  return out;
}

struct Trained {
  moco_v2::Moco moco;
  optim::MomentumSgd sgd;
};

Trained make_trained(bool skip) {
  moco_v2::MocoOptions options;
  options.queue_size = 20;
  options.momentum = 0.9;
  options.skip_nonfinite = skip;
  moco_v2::Moco m(tiny_encoder(), options, std::make_shared<dist::LocalProcessGroup>(), /*seed=*/1);
  m->train();
  optim::MomentumSgd sgd(m->trainable_parameters(), 0.9, 1e-4);
  sgd.set_lr(0.1);
  return {m, std::move(sgd)};
}

// Every parameter and buffer (both encoders, their BatchNorm statistics, the queue and its pointer)
// and the optimizer's momentum buffers.
std::vector<torch::Tensor> state_of(Trained& t) {
  std::vector<torch::Tensor> all;
  for (const auto& x : t.moco->parameters()) all.push_back(x.detach().clone());
  for (const auto& x : t.moco->buffers()) all.push_back(x.detach().clone());
  for (const auto& x : t.sgd.momentum_buffers()) all.push_back(x.detach().clone());
  return all;
}

// How many tensors differ (torch::equal: bit for bit, and a NaN differs from itself).
int differing(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !torch::equal(a[i], b[i]);
  return n + static_cast<int>(a.size() != b.size());
}

bool all_finite(const std::vector<torch::Tensor>& state) {
  for (const auto& t : state)
    if (t.is_floating_point() && !t.isfinite().all().item<bool>()) return false;
  return true;
}

}  // namespace

TEST(MocoTest, AFiniteStepWithTheSkipIsBitForBitTheStepWithout) {
  auto checking = make_trained(true), plain = make_trained(false);
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(4 + step);
    const auto out = train_step(checking.moco, checking.sgd);
    torch::manual_seed(4 + step);
    train_step(plain.moco, plain.sgd);
    ASSERT_TRUE(out.trained.item<bool>());
    EXPECT_EQ(out.nonfinite_by_rank.sum().item<int64_t>(), 0);
  }
  EXPECT_EQ(differing(state_of(checking), state_of(plain)), 0);
}

// Each way a step can go non-finite flags the rank with its cause and changes nothing, bit for bit
// (key encoder, both encoders' BatchNorm statistics, queue and pointer, weights, momentum buffers);
// the steps after it train, finite. Two finite steps first: momentum buffers that are not zero, and
// gradients bound to their flat buffer (MomentumSgd::nonfinite_gradients reads it).
TEST(MocoTest, AStepWithNonFiniteQueriesKeysLossOrGradientsChangesNothing) {
  struct Case {
    Poison poison;
    const char* name;
    int32_t must, must_not;  // NonfiniteCause bits that must and must not be set
  };
  const Case cases[] = {
      {Poison::kQueries, "queries", model::kNonfiniteQueries, 0},
      {Poison::kKeys, "keys", model::kNonfiniteKeys, model::kNonfiniteQueries},
      {Poison::kLoss, "loss", model::kNonfiniteLoss,
       model::kNonfiniteQueries | model::kNonfiniteKeys | model::kNonfiniteGradients},
      {Poison::kGradients, "gradients", model::kNonfiniteGradients,
       model::kNonfiniteQueries | model::kNonfiniteKeys | model::kNonfiniteLoss},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto t = make_trained(true);
    torch::manual_seed(4);
    for (int step = 0; step < 2; ++step) ASSERT_TRUE(train_step(t.moco, t.sgd).trained.item<bool>());
    const auto before = state_of(t);
    const auto out = train_step(t.moco, t.sgd, c.poison);
    EXPECT_FALSE(out.trained.item<bool>());
    const auto causes = out.nonfinite_by_rank[0].item<int32_t>();
    EXPECT_EQ(causes & c.must, c.must) << model::nonfinite_causes_text(causes);
    EXPECT_EQ(causes & c.must_not, 0) << model::nonfinite_causes_text(causes);
    EXPECT_EQ(differing(state_of(t), before), 0) << "a skipped step changed the state";
    for (int step = 0; step < 2; ++step) {
      const auto next = train_step(t.moco, t.sgd);
      EXPECT_TRUE(next.trained.item<bool>());
      EXPECT_TRUE(std::isfinite(next.loss.item<double>()));
    }
    const auto after = state_of(t);
    EXPECT_GT(differing(after, before), 0) << "the steps after it did not train";
    EXPECT_TRUE(all_finite(after));
  }
}

TEST(MocoTest, NonfiniteCausesAreNamed) {
  EXPECT_EQ(model::nonfinite_causes_text(model::kNonfiniteQueries | model::kNonfiniteLoss | model::kNonfiniteGradients),
            "queries, loss, gradients");
  EXPECT_EQ(model::nonfinite_causes_text(model::kNonfiniteKeys), "keys");
}

TEST(MocoTest, ForwardTwiceWithoutEndStepIsRefused) {
  auto moco = make_moco(20);
  auto out = moco->forward(torch::randn({4, 1, 8, 8}), torch::randn({4, 1, 8, 8}));
  EXPECT_THROW(moco->forward(torch::randn({4, 1, 8, 8}), torch::randn({4, 1, 8, 8})), std::logic_error);
  moco->end_step(out);
  EXPECT_THROW(moco->end_step(out), std::logic_error);
}

TEST(NonfiniteTest, NaNAndEitherInfinityAnywhereAreFoundAndHugeFiniteValuesAreNot) {
  for (const float bad :
       {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    for (const int64_t at : {0, 517, 999}) {
      auto t = torch::randn({1000});
      t[at] = bad;
      EXPECT_TRUE(model::holds_nonfinite(t).item<bool>()) << bad << " at " << at;
      EXPECT_TRUE(model::holds_nonfinite(t.view({10, 100}).t()).item<bool>()) << bad << " at " << at;
    }
  auto huge = torch::randn({1000});
  huge[3] = 3e38f;
  huge[4] = -3e38f;  // max - min would overflow to Inf
  EXPECT_FALSE(model::holds_nonfinite(huge).item<bool>());
  EXPECT_FALSE(model::holds_nonfinite(torch::tensor(2.5)).item<bool>());
  EXPECT_TRUE(model::holds_nonfinite(torch::tensor(std::nan(""))).item<bool>());
  EXPECT_FALSE(model::holds_nonfinite(torch::empty({0})).item<bool>());
}
