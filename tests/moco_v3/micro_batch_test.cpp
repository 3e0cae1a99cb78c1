// model.activation_checkpointing: a v3 ViT step bit for bit the step without it, whole or in pieces.
// optim.micro_batch (MocoV3ModelImpl::forward_backward_in_pieces, MocoV3::step): a v3 ViT step whose
// share runs in pieces is the whole share's step (a ResNet's too where its BatchNorm is frozen; in
// train mode its running statistics move once per piece). Gradients against an fp64 run of the whole batch
// within the error fp32 makes of the whole batch itself; the method's step (SGD, the reducer holding its
// averaging until the last piece at a world of one that rehearses world N) against the whole step; a
// share in one piece bit for bit today's step; on N ranks (mpi.np2, mpi.np4) each rank's pieces
// against one process with the global batch.
#include "dist/process_group.h"
#include "model/resnet.h"
#include "model/vit.h"
#include "moco_v3/moco_v3.h"
#include "moco_v3/v3_model.h"
#include "moco_v3/v3_settings.h"
#include "run/config.h"
#include "run/run_context.h"
#include "test_world.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace moco;

namespace {

constexpr int64_t kGlobalBatch = 16, kSide = 8;

moco_v3::V3Options head_options() {
  moco_v3::V3Options o;
  o.dim = 8;
  o.mlp_dim = 16;
  o.projector_layers = 3;
  o.predictor_last_bn = true;
  o.temperature = 0.2;
  return o;
}

moco_v3::MocoV3Model vit_model(torch::Dtype dtype) {
  torch::manual_seed(5);
  auto o = model::vit_options_for("vit_tiny_cpu");
  o.image_size = kSide;
  o.in_channels = 1;
  moco_v3::MocoV3Model m([&] { return model::Backbone(model::VisionTransformer(o)); }, head_options(),
                         std::make_shared<dist::LocalProcessGroup>());
  m->to(dtype);
  m->train();
  return m;
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// vit_tiny_cpu on 8 px images, SGD (its update is the gradient's, so the states compare as the
// gradients do), the official ViT heads.
run::Config vit_v3(int64_t micro_batch) {
  run::Config c;
  c.model.method = moco_v3::kMethod;
  c.model.arch = run::Arch::kVitTinyCpu;
  c.model.dim = 8;
  c.data.augment.out_size = kSide;
  c.optim.optimizer = run::Optimizer::kSgd;
  c.optim.momentum = 0.9;
  c.optim.weight_decay = 1e-4;
  c.optim.batch_size = kGlobalBatch;
  c.optim.micro_batch = micro_batch;
  auto& s = moco_v3::settings(c);
  s.mlp_dim = 16;
  s.projector_layers = 3;
  s.predictor_last_bn = true;
  s.temperature = 0.2;
  return c;
}

// The method keeps references to `c` and `context`: both must outlive it.
std::unique_ptr<moco_v3::MocoV3> make_v3(const run::Config& c, const run::RunContext& context) {
  torch::manual_seed(9);
  auto method = std::make_unique<moco_v3::MocoV3>(c, context, /*in_channels=*/1);
  method->set_run_length(10);
  method->set_lr(0.3);
  return method;
}

data::TwoViewBatch global_views(int64_t step) {
  torch::manual_seed(300 + static_cast<uint64_t>(step));
  data::TwoViewBatch batch;
  batch.query = torch::randn({kGlobalBatch, 1, kSide, kSide});
  batch.key = torch::randn({kGlobalBatch, 1, kSide, kSide});
  return batch;
}

data::TwoViewBatch share_of(const data::TwoViewBatch& batch, int64_t rank, int64_t world) {
  const int64_t n = kGlobalBatch / world;
  data::TwoViewBatch share;
  share.query = batch.query.narrow(0, rank * n, n);
  share.key = batch.key.narrow(0, rank * n, n);
  return share;
}

using State = std::map<std::string, torch::Tensor>;

State state_of(moco_v3::MocoV3& method) {
  State state;
  for (const auto& e : method.state_entries()) state[e.name] = e.tensor.detach().clone();
  return state;
}

// Each entry of `got` within 1e-4 of `want`'s scale (integer entries equal); "" or what differs, with
// the relative distance. fp32 rounding moves the heads' momentum buffers by up to 9e-6 here (the
// pieces' features differ from the whole batch's in the last bits, and the heads' BatchNorm over 16
// images amplifies that); a piece lost or averaged apart moves them by a quarter or more.
// (GradientsAreTheWholeBatchsWithinFp32Rounding bounds the gradients against fp64.)
std::string far_entries(const State& got, const State& want) {
  std::string far;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    if (it == got.end()) {
      far += " " + name + "(missing)";
    } else if (!w.is_floating_point() ? !torch::equal(it->second, w)
                                      : max_abs(it->second - w) > 1e-4 * std::max(1.0, max_abs(w))) {
      far += " " + name + "(" + std::to_string(max_abs(it->second - w) / std::max(1.0, max_abs(w))) + ")";
    }
  }
  return far;
}

std::string different_bits(const State& got, const State& want) {
  std::string names;
  for (const auto& [name, w] : want)
    if (!got.count(name) || !torch::equal(got.at(name), w)) names += " " + name;
  return names;
}

// A ResNet's (small stem, width 1/8) with the same heads. `frozen_statistics`: its BatchNorm in eval
// mode (the heads' stay in train mode): then no BatchNorm couples the rows of a piece.
moco_v3::MocoV3Model resnet_model(torch::Dtype dtype, bool frozen_statistics = false) {
  torch::manual_seed(5);
  auto o = model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  o.width = 0.125;
  moco_v3::MocoV3Model m([&] { return model::Backbone(model::ResNet(o)); }, head_options(),
                         std::make_shared<dist::LocalProcessGroup>());
  m->to(dtype);
  m->train();
  if (frozen_statistics) {
    for (auto* encoder : {&m->encoder_q, &m->encoder_k})
      for (const auto& child : (*encoder)->named_children())
        if (child.key() != "fc") child.value()->eval();  // "fc" holds the projector
  }
  return m;
}

// Every trained parameter's gradient from pieces of 4 and of 2 is within the error of fp32's whole
// batch against fp64's (times 4, plus 64 ulps of the gradient's scale); the heads' BatchNorm
// statistics and the momentum encoder are the whole batch's.
void expect_pieces_give_the_whole_batchs_gradients(const std::function<moco_v3::MocoV3Model(torch::Dtype)>& make) {
  torch::manual_seed(77);
  const auto x1 = torch::randn({kGlobalBatch, 1, kSide, kSide}), x2 = torch::randn({kGlobalBatch, 1, kSide, kSide});
  auto exact = make(torch::kDouble);
  exact->forward(x1.to(torch::kDouble), x2.to(torch::kDouble), 0.99).loss.backward();
  auto whole = make(torch::kFloat);
  const auto whole_loss = whole->forward(x1, x2, 0.99).loss;
  whole_loss.backward();
  const auto names = whole->trainable_names();
  const auto exact_params = exact->trainable_parameters(), whole_params = whole->trainable_parameters();
  for (const int64_t piece : {4, 2}) {
    auto pieces = make(torch::kFloat);
    const auto out = pieces->forward_backward_in_pieces(x1, x2, x1, x2, 0.99, piece, {});
    EXPECT_NEAR(out.loss.item<double>(), whole_loss.item<double>(), 1e-5) << "piece " << piece;
    const auto got = pieces->trainable_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].grad().defined()) << names[i];
      const auto want = exact_params[i].grad().to(torch::kFloat);
      const double whole_error = max_abs(whole_params[i].grad() - want);
      const double bound = 4 * whole_error + 64 * 1.2e-7 * max_abs(want);
      EXPECT_LE(max_abs(got[i].grad() - want), bound) << names[i] << " in pieces of " << piece;
    }
    const auto want_buffers = whole->named_buffers();
    for (const auto& item : pieces->named_buffers()) {
      if (!item.value().is_floating_point()) continue;
      EXPECT_TRUE(torch::allclose(item.value(), want_buffers[item.key()], 1e-5, 1e-7)) << item.key();
    }
    const auto want_k = whole->encoder_k->parameters(), got_k = pieces->encoder_k->parameters();
    for (size_t i = 0; i < got_k.size(); ++i) EXPECT_TRUE(torch::equal(got_k[i], want_k[i]));
  }
}

}  // namespace

TEST(MicroBatchTest, GradientsAreTheWholeBatchsWithinFp32Rounding) {
  expect_pieces_give_the_whole_batchs_gradients(vit_model);
}

// Where the backbone's BatchNorm couples no rows (eval mode), a ResNet's pieces are the whole batch's
// step as a ViT's are.
TEST(MicroBatchTest, AResNetWithFrozenStatisticsGivesTheWholeBatchsGradients) {
  expect_pieces_give_the_whole_batchs_gradients([](torch::Dtype dtype) { return resnet_model(dtype, true); });
}

// In train mode a ResNet's BatchNorm normalises each piece apart and its running statistics move once
// per piece, in the first pass, not again in the second: bit for bit those of the first pass's
// forwards replayed alone (each view's pieces in order), and the counts at 2 views x 4 pieces.
TEST(MicroBatchTest, AResNetsRunningStatisticsMoveOncePerPiece) {
  torch::manual_seed(78);
  const auto x1 = torch::randn({kGlobalBatch, 1, kSide, kSide}), x2 = torch::randn({kGlobalBatch, 1, kSide, kSide});
  auto pieces = resnet_model(torch::kFloat);
  pieces->forward_backward_in_pieces(x1, x2, x1, x2, 0.99, /*piece=*/4, {});
  auto replay = resnet_model(torch::kFloat);
  {
    torch::NoGradGuard no_grad;
    for (const auto& view : {x1, x2})
      for (const auto& part : view.split(4)) replay->encoder_q->features(part);
  }
  const auto want = replay->encoder_q->named_buffers();
  int64_t counts = 0;
  for (const auto& item : pieces->encoder_q->named_buffers()) {
    if (item.key().rfind("fc.", 0) == 0) continue;  // the projector's: once over the whole batch
    EXPECT_TRUE(torch::equal(item.value(), want[item.key()])) << item.key();
    if (item.key().find("num_batches_tracked") == std::string::npos) continue;
    EXPECT_EQ(item.value().item<int64_t>(), 8) << item.key();
    ++counts;
  }
  EXPECT_GT(counts, 0);
}

// optim.micro_batch equal to the share runs today's step, not the pieces' path: bit for bit.
TEST(MicroBatchTest, AShareInOnePieceIsTodaysStepBitForBit) {
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  const auto whole_config = vit_v3(0), one_piece_config = vit_v3(kGlobalBatch);  // the methods keep references
  auto today = make_v3(whole_config, context), one_piece = make_v3(one_piece_config, context);
  for (int64_t step = 1; step <= 2; ++step) {
    const auto batch = global_views(step);
    EXPECT_TRUE(torch::equal(one_piece->step(batch, step).loss, today->step(batch, step).loss));
  }
  EXPECT_EQ(different_bits(state_of(*one_piece), state_of(*today)), "");
}

// Two steps of the method in pieces of 4 and of 2 (with the reducer on: dist.world_group_at_one, so
// that its averaging is held until the last piece) leave every checkpointed tensor (both encoders,
// the predictor, every BatchNorm buffer, SGD's momentum) within fp32 rounding of the whole step's.
TEST(MicroBatchTest, AMicroBatchedStepIsTheWholeStep) {
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  for (const bool rehearse : {false, true}) {
    auto whole_config = vit_v3(0);
    whole_config.dist.world_group_at_one = rehearse;
    auto whole = make_v3(whole_config, context);
    for (int64_t step = 1; step <= 2; ++step) whole->step(global_views(step), step);
    for (const int64_t piece : {4, 2}) {
      auto config = vit_v3(piece);
      config.dist.world_group_at_one = rehearse;
      auto pieces = make_v3(config, context);
      for (int64_t step = 1; step <= 2; ++step) {
        const auto out = pieces->step(global_views(step), step);
        EXPECT_TRUE(out.trained.item<bool>()) << "piece " << piece << " step " << step;
      }
      EXPECT_EQ(far_entries(state_of(*pieces), state_of(*whole)), "")
          << "pieces of " << piece << (rehearse ? " with the reducer" : "");
    }
  }
}

// Each rank's share in pieces of 2 on N ranks (SyncBN in the heads, the keys gathered, the reducer's
// average once per step) against one process with the global batch in one piece: every checkpointed
// tensor within fp32 rounding, and the ranks' losses averaged are its loss. Also under mpirun.
TEST(DistMicroBatchTest, RanksInPiecesEqualOneProcessWithTheGlobalBatch) {
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank();
  run::RunContext one, ranked;
  one.group = std::make_shared<dist::LocalProcessGroup>();
  ranked.group = group;
  const auto whole_config = vit_v3(0), pieces_config = vit_v3(2);  // the methods keep references
  auto whole = make_v3(whole_config, one), pieces = make_v3(pieces_config, ranked);
  for (int64_t step = 1; step <= 2; ++step) {
    const auto batch = global_views(step);
    const auto want = whole->step(batch, step).loss;
    auto got = pieces->step(share_of(batch, rank, world), step).loss.detach().reshape({1}).clone();
    group->all_reduce(got, dist::ReduceOp::kAvg);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << "step " << step << " rank " << rank;
  }
  EXPECT_EQ(far_entries(state_of(*pieces), state_of(*whole)), "") << "rank " << rank;
}

// The blocks (stages) run again in backward (model::checkpointed): two steps of the method with a ViT
// and with a ResNet, whole and in pieces of 4, leave every checkpointed tensor bit for bit as without it.
TEST(ActivationCheckpointingTest, AV3StepIsBitForBitTheStepWithout) {
  run::RunContext context;
  context.group = std::make_shared<dist::LocalProcessGroup>();
  for (const auto arch : {run::Arch::kVitTinyCpu, run::Arch::kResnetTiny}) {
    for (const int64_t piece : {0, 4}) {
      auto checkpointing_config = vit_v3(piece), plain_config = vit_v3(piece);  // the methods keep references
      checkpointing_config.model.arch = plain_config.model.arch = arch;
      checkpointing_config.model.activation_checkpointing = true;
      const std::string what = std::string(run::to_string(arch)) + " in pieces of " + std::to_string(piece);
      auto plain = make_v3(plain_config, context), checkpointing = make_v3(checkpointing_config, context);
      for (int64_t step = 1; step <= 2; ++step) {
        const auto batch = global_views(step);
        EXPECT_TRUE(torch::equal(checkpointing->step(batch, step).loss, plain->step(batch, step).loss))
            << what << " step " << step;
      }
      EXPECT_EQ(different_bits(state_of(*checkpointing), state_of(*plain)), "") << what;
    }
  }
}
