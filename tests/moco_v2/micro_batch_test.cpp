// optim.micro_batch for MoCo v1/v2 (MocoImpl::forward_backward_in_pieces, MocoV2::step): each
// query's loss reads the queue, not the other rows, so where BatchNorm couples no rows (eval mode) a
// step in pieces is the whole share's step: the loss, the gradients and so the trained encoder, the
// key encoder, the queue and its pointer, against the whole step in float64 (the orders of sums
// differ, 1e-10 of the scale is far below a piece lost, weighted wrongly or enqueued early). On N
// ranks (mpi.np2, mpi.np4) each rank's pieces against one process with the global batch: every
// piece's keys enter the queue after the last piece, in rank order. In train mode BatchNorm sees a
// piece at a time and its running statistics move once per piece; a non-finite piece undoes the
// whole step; a share in one piece is today's step bit for bit.
#include "app/methods.h"
#include "dist/reducer.h"
#include "moco_v2/moco.h"
#include "moco_v2/moco_v2.h"
#include "run/config.h"
#include "run/run_context.h"

#include "default_dtype.h"
#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

// Named, not anonymous: the unity build puts this file beside others with helpers of the same names.
namespace v2_micro_batch {

using namespace moco;
namespace F = torch::nn::functional;

model::ResNetOptions tiny_encoder() {
  auto o = model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  o.width = 0.125;
  o.out_dim = 16;
  o.mlp_head = true;
  return o;
}

// A queue of 20 wraps within the third step of 8 keys.
moco_v2::Moco make_moco(std::shared_ptr<dist::ProcessGroup> group, bool train_mode, bool skip_nonfinite = false) {
  moco_v2::MocoOptions o;
  o.queue_size = 20;
  o.momentum = 0.9;
  o.temperature = 0.2;
  o.skip_nonfinite = skip_nonfinite;
  moco_v2::Moco m(tiny_encoder(), o, std::move(group), /*seed=*/3);
  if (train_mode) {
    m->train();
  } else {
    m->eval();
  }
  return m;
}

torch::optim::SGD make_sgd(moco_v2::Moco& moco) {
  return torch::optim::SGD(moco->trainable_parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
}

// The step's global batch of two views, the same on every rank.
std::pair<torch::Tensor, torch::Tensor> views(int64_t step, int64_t rows) {
  auto gen = at::detail::createCPUGenerator(700 + step);
  return {torch::randn({rows, 1, 8, 8}, gen), torch::randn({rows, 1, 8, 8}, gen)};
}

torch::Tensor flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : tensors) parts.push_back(t.detach().to(torch::kDouble).flatten());
  return torch::cat(parts);
}

// "" when `got` is within 1e-10 of `want`'s largest magnitude, else how far.
std::string far(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>() + 1e-30;
  const double off = (got - want).abs().max().item<double>();
  return off <= 1e-10 * scale ? "" : "off by " + std::to_string(off) + " of " + std::to_string(scale);
}

std::vector<torch::Tensor> buffers_of(moco_v2::MocoImpl& moco) {
  auto buffers = moco.encoder_q->buffers();
  for (const auto& b : moco.encoder_k->buffers()) buffers.push_back(b);
  return buffers;
}

std::vector<torch::Tensor> gradients_of(moco_v2::MocoImpl& moco) {
  std::vector<torch::Tensor> gradients;
  for (const auto& p : moco.trainable_parameters()) gradients.push_back(p.grad());
  return gradients;
}

// Pieces of 4 and of 2 against the whole share of 8, three steps of SGD (the queue wraps).
TEST(V2MicroBatchTest, WhereBatchNormCouplesNoRowsPiecesAreTheWholeStep) {
  const DefaultDtype float64(torch::kFloat64);
  auto local = std::make_shared<dist::LocalProcessGroup>();
  for (const int64_t piece : {4, 2}) {
    auto whole = make_moco(local, /*train_mode=*/false), pieces = make_moco(local, false);
    auto whole_sgd = make_sgd(whole), pieces_sgd = make_sgd(pieces);
    for (int64_t step = 0; step < 3; ++step) {
      const std::string at = "pieces of " + std::to_string(piece) + ", step " + std::to_string(step);
      const auto [im_q, im_k] = views(step, 8);
      auto want = whole->forward(im_q, im_k);
      whole_sgd.zero_grad();
      want.loss.backward();
      const auto want_gradients = flat(gradients_of(*whole));
      whole->end_step(want);
      whole_sgd.step();

      pieces_sgd.zero_grad();
      auto got = pieces->forward_backward_in_pieces(im_q, im_k, piece);
      EXPECT_FALSE(got.loss.requires_grad()) << at;
      const auto gradients = flat(gradients_of(*pieces));
      pieces->end_step(got);
      pieces_sgd.step();

      EXPECT_EQ(far(got.loss, want.loss), "") << "loss, " << at;
      EXPECT_EQ(far(gradients, want_gradients), "") << "gradients, " << at;
      EXPECT_TRUE(torch::equal(got.positive_rank, want.positive_rank)) << at;
      EXPECT_EQ(far(got.k, want.k), "") << "keys, " << at;
      EXPECT_EQ(far(got.q_features, want.q_features), "") << "probe features, " << at;
      EXPECT_EQ(far(pieces->queue(), whole->queue()), "") << "queue, " << at;
      EXPECT_EQ(pieces->queue_pointer(), whole->queue_pointer()) << at;
      EXPECT_EQ(far(flat(pieces->encoder_q->parameters()), flat(whole->encoder_q->parameters())), "") << at;
      EXPECT_EQ(far(flat(pieces->encoder_k->parameters()), flat(whole->encoder_k->parameters())), "") << at;
    }
  }
}

// In train mode each piece's queries are normalised by that piece's statistics alone (as a rank with a
// smaller batch would), and every BatchNorm's running statistics move once per piece.
TEST(V2MicroBatchTest, InTrainModeBatchNormSeesAPieceAtATime) {
  auto moco = make_moco(std::make_shared<dist::LocalProcessGroup>(), /*train_mode=*/true);
  const auto [im_q, im_k] = views(0, 8);
  auto out = moco->forward_backward_in_pieces(im_q, im_k, /*piece=*/2);
  moco->end_step(out);
  for (const auto& item : moco->named_buffers()) {
    if (item.key().find("num_batches_tracked") == std::string::npos) continue;
    EXPECT_EQ(item.value().item<int64_t>(), 4) << item.key() << ": 4 pieces";
  }
  torch::NoGradGuard no_grad;
  const auto first_piece =
      F::normalize(moco->encoder_q->forward(im_q.narrow(0, 0, 2)), F::NormalizeFuncOptions().dim(1));
  EXPECT_TRUE(torch::allclose(out.q.narrow(0, 0, 2), first_piece, 1e-5, 1e-6));
  const auto in_the_whole = F::normalize(moco->encoder_q->forward(im_q), F::NormalizeFuncOptions().dim(1));
  EXPECT_FALSE(torch::allclose(out.q.narrow(0, 0, 2), in_the_whole.narrow(0, 0, 2), 1e-3, 1e-3));
}

// A NaN in the last piece's keys: the whole step is undone (the key encoder, every BatchNorm buffer,
// the queue and its pointer as before the first piece), as a NaN in the whole share's.
TEST(V2MicroBatchTest, ANonFinitePieceUndoesTheWholeStep) {
  auto moco = make_moco(std::make_shared<dist::LocalProcessGroup>(), /*train_mode=*/true, /*skip_nonfinite=*/true);
  const auto [warm_q, warm_k] = views(0, 8);
  auto warm = moco->forward_backward_in_pieces(warm_q, warm_k, 2);
  moco->end_step(warm);
  ASSERT_TRUE(warm.trained.item<bool>());
  const auto key_before = flat(moco->encoder_k->parameters()).clone(), buffers_before = flat(buffers_of(*moco)).clone();
  const auto queue_before = moco->queue().clone();
  const int64_t pointer_before = moco->queue_pointer();
  auto [im_q, im_k] = views(1, 8);
  im_k[7].fill_(std::numeric_limits<float>::quiet_NaN());
  auto out = moco->forward_backward_in_pieces(im_q, im_k, 2);
  moco->end_step(out);
  EXPECT_FALSE(out.trained.item<bool>());
  EXPECT_TRUE(torch::equal(flat(moco->encoder_k->parameters()), key_before));
  EXPECT_TRUE(torch::equal(flat(buffers_of(*moco)), buffers_before));
  EXPECT_TRUE(torch::equal(moco->queue(), queue_before));
  EXPECT_EQ(moco->queue_pointer(), pointer_before);
}

// A share of 4 rows per rank in pieces of 2 on N ranks (the reducer holding its average until the last
// piece, keys shuffled across ranks per piece) against one process with the global batch in one piece.
TEST(DistV2MicroBatchTest, RanksInPiecesEqualOneProcessWithTheGlobalBatch) {
  const DefaultDtype float64(torch::kFloat64);
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank(), share = 4;
  auto ranked = make_moco(group, /*train_mode=*/false),
       one = make_moco(std::make_shared<dist::LocalProcessGroup>(), false);
  auto ranked_sgd = make_sgd(ranked), one_sgd = make_sgd(one);
  dist::GradientReducer reducer(ranked->trainable_parameters(), group, /*bucket=*/16 << 10, /*first=*/4 << 10);
  run::PieceHooks<moco_v2::MocoOutput> hooks;
  hooks.before_first_backward = [&] { reducer.accumulate_locally(true); };
  hooks.before_last_backward = [&] { reducer.accumulate_locally(false); };
  for (int64_t step = 0; step < 3; ++step) {
    const std::string at = "step " + std::to_string(step) + " on rank " + std::to_string(rank);
    const auto [im_q, im_k] = views(step, share * world);
    ranked_sgd.zero_grad();
    auto got = ranked->forward_backward_in_pieces(im_q.narrow(0, rank * share, share),
                                                  im_k.narrow(0, rank * share, share), /*piece=*/2, hooks);
    reducer.finalize();
    ranked->end_step(got);
    ranked_sgd.step();
    auto want = one->forward(im_q, im_k);
    one_sgd.zero_grad();
    want.loss.backward();
    one->end_step(want);
    one_sgd.step();

    auto loss = got.loss.reshape({1}).clone();
    group->all_reduce(loss, dist::ReduceOp::kAvg);
    EXPECT_EQ(far(loss, want.loss.detach().reshape({1})), "") << "loss, " << at;
    EXPECT_EQ(far(ranked->queue(), one->queue()), "") << "queue, " << at;
    EXPECT_EQ(ranked->queue_pointer(), one->queue_pointer()) << at;
    EXPECT_EQ(far(flat(ranked->encoder_q->parameters()), flat(one->encoder_q->parameters())), "") << at;
  }
}

run::Config tiny_config(int64_t micro_batch) {
  return run::load_config(moco::app::methods(), MOCO_TEST_DATA_DIR "/tiny_synthetic.yaml",
                          {"train.threads=1", "optim.micro_batch=" + std::to_string(micro_batch)});
}

std::vector<torch::Tensor> state_of(moco_v2::MocoV2& method) {
  std::vector<torch::Tensor> state;
  for (const auto& e : method.state_entries()) state.push_back(e.tensor.detach().clone());
  return state;
}

// optim.micro_batch equal to the share runs today's step, not the pieces' path: bit for bit.
TEST(V2MicroBatchTest, AShareInOnePieceIsTodaysStepBitForBit) {
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  const auto today_config = tiny_config(0), one_piece_config = tiny_config(32);  // the methods keep references
  ASSERT_EQ(one_piece_config.optim.batch_size, 32);
  torch::manual_seed(4);
  moco_v2::MocoV2 today(today_config, context, /*in_channels=*/3);
  moco_v2::MocoV2 one_piece(one_piece_config, context, 3);
  const int64_t side = today_config.data.augment.out_size;
  for (int64_t step = 1; step <= 2; ++step) {
    const data::TwoViewBatch batch{torch::randn({32, 3, side, side}), torch::randn({32, 3, side, side}),
                                   torch::zeros({32}, torch::kLong), torch::arange(32)};
    today.set_lr(0.03);
    one_piece.set_lr(0.03);
    EXPECT_TRUE(torch::equal(one_piece.step(batch, step).loss, today.step(batch, step).loss)) << "step " << step;
  }
  const auto want = state_of(today), got = state_of(one_piece);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << "entry " << i;
}

}  // namespace v2_micro_batch
