// MoCo v3's pieces (src/moco_v3): the MLP heads, the momentum's schedule, the keys' lack of gradient,
// LARS's exclusion of 1-D parameters, the labels' rank offset (DistMocoV3Test, also under mpirun),
// the R50 recipe's config (PaperConfigTest.MocoV3R50IsTheOfficialRecipe).
// The whole step against PyTorch: tests/parity/moco_v3_step_parity.py.
#include "constant_table.h"
#include "moco_v3/v3_settings.h"
#include "optim/optimizer.h"
#include "app/methods.h"
#include "dist/process_group.h"
#include "optim/lars.h"
#include "moco_v3/moco_v3.h"
#include "moco_v3/v3_model.h"
#include "model/vit.h"
#include "run/config.h"
#include "run/run_context.h"
#include "test_world.h"
#include "train/schedule.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <string>

using namespace moco;
using moco_v3::momentum_at;

namespace {

model::ResNetOptions tiny_backbone() {
  auto o = model::resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  o.width = 0.125;
  o.out_dim = 8;
  return o;
}

std::set<std::string> names_of(torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& item : module.named_parameters()) names.insert(item.key());
  for (const auto& item : module.named_buffers()) names.insert(item.key());
  return names;
}

}  // namespace

TEST(MocoV3Test, MomentumRisesFromM0ToOneOnAHalfCosine) {
  EXPECT_DOUBLE_EQ(momentum_at(0.99, 0.0), 0.99);
  EXPECT_NEAR(momentum_at(0.99, 0.5), 0.995, 1e-12);
  EXPECT_NEAR(momentum_at(0.99, 0.25), 1 - 0.01 * (std::cos(M_PI / 4) + 1) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(momentum_at(0.99, 1.0), 1.0);
}

// v3.momentum_schedule: cosine follows momentum_at; constant keeps m0, as main_moco.py without
// --moco-m-cos (issue 57, W4).
TEST(MocoV3Test, MomentumScheduleIsCosineOrConstant) {
  moco_v3::Settings s;
  s.momentum = 0.99;
  EXPECT_EQ(moco_v3::scheduled_momentum(s, 0.5), momentum_at(0.99, 0.5));
  s.momentum_schedule = "constant";
  for (double p : {0.0, 0.5, 1.0}) EXPECT_EQ(moco_v3::scheduled_momentum(s, p), 0.99) << p;
}

// The official builder's layout: Linear without bias, BN and ReLU between, the projector's last BN
// without affine, nothing after the predictor's last Linear.
TEST(MocoV3Test, MlpHeadsHaveTheOfficialLayout) {
  auto projector = moco_v3::make_mlp(2, 12, 16, 4, /*last_bn=*/true);
  EXPECT_EQ(names_of(*projector), (std::set<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean",
                                                         "1.running_var", "1.num_batches_tracked", "3.weight",
                                                         "4.running_mean", "4.running_var", "4.num_batches_tracked"}));
  auto predictor = moco_v3::make_mlp(2, 4, 16, 4, /*last_bn=*/false);
  EXPECT_EQ(predictor->size(), 4u);
  EXPECT_EQ(predictor->named_parameters()["3.weight"].sizes(), (std::vector<int64_t>{4, 16}));
  auto three = moco_v3::make_mlp(3, 12, 16, 4, true);
  EXPECT_EQ(three->size(), 8u);
}

// Keys are targets: no gradient reaches the momentum encoder through them, and the predictor stays
// on the query side only; the query encoder and predictor get their gradients.
TEST(MocoV3Test, KeysCarryNoGradient) {
  torch::manual_seed(3);
  moco_v3::V3Options options;
  options.dim = 8;
  options.mlp_dim = 16;
  moco_v3::MocoV3Model model(tiny_backbone(), options, std::make_shared<dist::LocalProcessGroup>());
  model->train();
  const auto x1 = torch::randn({6, 1, 12, 12}), x2 = torch::randn({6, 1, 12, 12});
  auto out = model->forward(x1, x2, 0.99);
  EXPECT_FALSE(out.k2.requires_grad());
  EXPECT_TRUE(out.q1.requires_grad());
  out.loss.backward();
  for (const auto& item : model->encoder_k->named_parameters())
    EXPECT_FALSE(item.value().grad().defined()) << "encoder_k." << item.key() << " got a gradient";
  for (const auto& p : model->trainable_parameters()) EXPECT_TRUE(p.grad().defined());
}

// The official MoCo_ViT: the ViT's head is the projector (3 layers, its last BN without affine) in
// both encoders, under timm's names (encoder_q/head.N...); the optimizer trains neither the fixed
// position embedding nor, with stop-grad-conv1, the patch projection; keys carry no gradient.
TEST(MocoV3Test, VitHeadIsTheProjector) {
  torch::manual_seed(4);
  auto vit = model::vit_options_for("vit_tiny_cpu");
  vit.image_size = 8;
  vit.in_channels = 1;
  vit.depth = 1;
  vit.stop_grad_conv1 = true;
  moco_v3::V3Options options;
  options.dim = 8;
  options.mlp_dim = 16;
  options.projector_layers = 3;
  moco_v3::MocoV3Model model([&] { return model::Backbone(model::VisionTransformer(vit)); }, options,
                             std::make_shared<dist::LocalProcessGroup>());
  model->train();
  const auto names = names_of(*model->encoder_q);
  for (const char* name : {"head.0.weight", "head.1.weight", "head.3.weight", "head.6.weight", "head.7.running_var",
                           "pos_embed", "cls_token", "patch_embed.proj.weight"})
    EXPECT_EQ(names.count(name), 1u) << name;
  EXPECT_EQ(names.count("head.weight"), 0u);
  EXPECT_EQ(names.count("head.7.weight"), 0u);  // the last BN has no affine
  EXPECT_EQ(names, names_of(*model->encoder_k));
  const auto trained = model->trainable_names();
  const std::set<std::string> trained_set(trained.begin(), trained.end());
  EXPECT_EQ(trained.size(), model->trainable_parameters().size());
  for (const char* frozen :
       {"encoder_q/pos_embed", "encoder_q/patch_embed.proj.weight", "encoder_q/patch_embed.proj.bias"})
    EXPECT_EQ(trained_set.count(frozen), 0u) << frozen;
  EXPECT_EQ(trained_set.count("encoder_q/cls_token"), 1u);
  EXPECT_EQ(model->encoder_q->feature_dim(), 64);
  auto out = model->forward(torch::randn({6, 1, 8, 8}), torch::randn({6, 1, 8, 8}), 0.99);
  EXPECT_FALSE(out.k2.requires_grad());
  EXPECT_EQ(out.features.sizes(), (std::vector<int64_t>{6, 64}));
  out.loss.backward();
  for (const auto& p : model->trainable_parameters()) EXPECT_TRUE(p.grad().defined());
}

// The official MoCo_ViT's predictor ends in BatchNorm1d(dim, affine=False) (moco-v3's builder.py: the
// ViT's _build_mlp(2, dim, mlp_dim, dim) keeps last_bn's default, true; MoCo_ResNet passes false):
// with predictor_last_bn the predictor holds predictor.4's running statistics and no weight or bias,
// under the checkpoint's names, and they move in a training step; without it (the default, the
// ResNet's) the predictor ends in its Linear.
TEST(MocoV3Test, PredictorLastBnIsTheOfficialVitPredictor) {
  torch::manual_seed(5);
  auto vit = model::vit_options_for("vit_tiny_cpu");
  vit.image_size = 8;
  vit.in_channels = 1;
  vit.depth = 1;
  moco_v3::V3Options options;
  options.dim = 8;
  options.mlp_dim = 16;
  options.projector_layers = 3;
  EXPECT_FALSE(options.predictor_last_bn);
  options.predictor_last_bn = true;
  moco_v3::MocoV3Model model([&] { return model::Backbone(model::VisionTransformer(vit)); }, options,
                             std::make_shared<dist::LocalProcessGroup>());
  model->train();
  EXPECT_EQ(names_of(*model->predictor),
            (std::set<std::string>{"0.weight", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                   "1.num_batches_tracked", "3.weight", "4.running_mean", "4.running_var",
                                   "4.num_batches_tracked"}));
  const auto x = torch::randn({6, 1, 8, 8});
  model->forward(x, x * 0.5, 0.99).loss.backward();
  const auto buffers = model->predictor->named_buffers();
  EXPECT_FALSE(torch::equal(buffers["4.running_mean"], torch::zeros({8})));
  EXPECT_EQ(buffers["4.num_batches_tracked"].item<int64_t>(), 2);  // both views
  const optim::Optimizer optimizer(optim::Algorithm::kSgd, model->trainable_parameters(), 0.9, 0);
  std::set<std::string> entries;
  for (const auto& entry : moco_v3::v3_state_entries(*model, optimizer)) entries.insert(entry.name);
  for (const char* name : {"predictor/4.running_mean", "predictor/4.running_var", "predictor/4.num_batches_tracked"})
    EXPECT_EQ(entries.count(name), 1u) << name;
  EXPECT_EQ(entries.count("predictor/4.weight"), 0u);
  moco_v3::V3Options resnet_options;
  resnet_options.dim = 8;
  resnet_options.mlp_dim = 16;
  moco_v3::MocoV3Model resnet(tiny_backbone(), resnet_options, std::make_shared<dist::LocalProcessGroup>());
  EXPECT_EQ(resnet->predictor->size(), 4u);
  for (const auto& name : names_of(*resnet->predictor)) EXPECT_NE(name.rfind("4.", 0), 0u) << name;
}

// train.precision bf16: the query and the key branches run under autocast (their outputs differ from
// fp32's by bf16's rounding, not more) and come back widened to fp32 for the loss.
TEST(MocoV3Test, Bf16RunsBothBranchesUnderAutocast) {
  moco_v3::V3Options options;
  options.dim = 8;
  options.mlp_dim = 16;
  std::vector<moco_v3::V3Output> outs;
  torch::manual_seed(4);
  const auto x1 = torch::randn({6, 1, 12, 12}), x2 = torch::randn({6, 1, 12, 12});
  for (const bool bf16 : {false, true}) {
    options.autocast = bf16 ? torch::kBFloat16 : torch::kFloat;
    torch::manual_seed(3);
    moco_v3::MocoV3Model model(tiny_backbone(), options, std::make_shared<dist::LocalProcessGroup>());
    model->train();
    outs.push_back(model->forward(x1, x2, 0.99));
    outs.back().loss.backward();
    for (const auto& p : model->trainable_parameters()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
  const auto &fp32 = outs[0], &bf16 = outs[1];
  for (const auto* t : {&bf16.q1, &bf16.k2, &bf16.features, &bf16.loss}) EXPECT_EQ(t->scalar_type(), torch::kFloat);
  EXPECT_FALSE(torch::equal(bf16.q1, fp32.q1)) << "the query branch did not run in bf16";
  EXPECT_FALSE(torch::equal(bf16.k2, fp32.k2)) << "the key branch did not run in bf16";
  // The branches end in BatchNorm over 6 rows: bf16's rounding moves single elements, not the direction
  // each row points in, which is what the loss reads.
  namespace F = torch::nn::functional;
  for (const auto& [got, want] : {std::pair{bf16.q1, fp32.q1}, std::pair{bf16.k2, fp32.k2}})
    EXPECT_GT(F::cosine_similarity(got, want, F::CosineSimilarityFuncOptions().dim(1)).min().item<double>(), 0.95)
        << got - want;
  EXPECT_NEAR(bf16.loss.item<double>(), fp32.loss.item<double>(), 0.05 * fp32.loss.item<double>());
}

// LARS as the official optimizer.py: matrices get weight decay and the trust ratio, vectors neither.
TEST(MocoV3Test, LarsScalesMatricesAndLeavesVectorsAlone) {
  auto w = torch::tensor({{1.0f, -2.0f}, {0.5f, 3.0f}}).requires_grad_();
  auto b = torch::tensor({0.25f, -1.0f}).requires_grad_();
  w.mutable_grad() = torch::tensor({{0.1f, 0.2f}, {-0.3f, 0.4f}});
  b.mutable_grad() = torch::tensor({0.5f, -0.5f});
  const auto w0 = w.detach().clone(), b0 = b.detach().clone();
  const double lr = 0.5, wd = 0.1, momentum = 0.9;
  optim::Lars lars({w, b}, momentum, wd);
  lars.set_lr(lr);
  lars.step();
  const auto d = w.grad() + wd * w0;
  const auto trust = optim::Lars::kTrustCoefficient * w0.norm() / d.norm();
  EXPECT_TRUE(torch::allclose(w.detach(), w0 - lr * trust * d, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(b.detach(), b0 - lr * b.grad(), 1e-6, 1e-7));
  // The second step carries the momentum buffer.
  const auto mu_b = b.grad().clone();
  lars.step();
  EXPECT_TRUE(torch::allclose(b.detach(), b0 - lr * b.grad() - lr * (momentum * mu_b + b.grad()), 1e-6, 1e-7));
}

// Every rank's queries against every rank's keys: query i of rank r has the positive n*r + i, so the
// ranks' losses averaged are the loss of one process over the global batch (the gradient averaging
// of DDP then gives that loss's gradient). Also under mpirun (ctest mpi.np2, mpi.np4).
TEST(DistMocoV3Test, LabelsAreOffsetByRank) {
  auto group = test_world_group();
  const int64_t n = 5, world = group->world_size(), rank = group->rank(), dim = 7;
  const double temperature = 0.5;
  torch::manual_seed(11);  // the same global batch on every rank
  const auto q_all = torch::randn({n * world, dim}), k_all = torch::randn({n * world, dim});
  const auto q = q_all.narrow(0, rank * n, n).clone().requires_grad_();
  const auto k = k_all.narrow(0, rank * n, n).contiguous();
  const auto got = moco_v3::contrastive_loss(q, k, temperature, *group);

  namespace F = torch::nn::functional;
  const auto logits = F::normalize(q_all, F::NormalizeFuncOptions().dim(1))
                          .mm(F::normalize(k_all, F::NormalizeFuncOptions().dim(1)).t()) /
                      temperature;
  const auto per_row =
      F::cross_entropy(logits, torch::arange(n * world), F::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto expected = per_row.narrow(0, rank * n, n).mean() * (2 * temperature);
  EXPECT_NEAR(got.loss.item<double>(), expected.item<double>(), 1e-5) << "rank " << rank;
  auto sum = got.loss.detach().reshape({1}).clone();
  group->all_reduce(sum, dist::ReduceOp::kAvg);
  EXPECT_NEAR(sum.item<double>(), per_row.mean().item<double>() * 2 * temperature, 1e-5);
  const auto positives = logits.gather(1, torch::arange(n * world).unsqueeze(1));
  const auto ranks = (logits > positives).sum(1).narrow(0, rank * n, n);
  EXPECT_TRUE(torch::equal(got.positive_rank, ranks));
}

// The whole v3 forward and backward on each rank's share (SyncBN in the backbone and both heads, the
// keys gathered, the labels offset) against one process with the global batch: the ranks' losses
// averaged are its loss, their gradients averaged (DDP) are its gradients, and every BatchNorm's running
// statistics are its. Also under mpirun (mpi.np2, mpi.np4).
TEST(DistMocoV3Test, RanksEqualOneProcessWithTheGlobalBatch) {
  auto group = test_world_group();
  const int64_t world = group->world_size(), rank = group->rank(), n = 3;
  moco_v3::V3Options options;
  options.dim = 8;
  options.mlp_dim = 16;
  options.temperature = 0.2;
  torch::manual_seed(21);
  moco_v3::MocoV3Model one_process(tiny_backbone(), options, std::make_shared<dist::LocalProcessGroup>());
  torch::manual_seed(21);
  moco_v3::MocoV3Model ranked(tiny_backbone(), options, group);
  one_process->train();
  ranked->train();
  const auto x1 = torch::randn({n * world, 1, 12, 12}), x2 = torch::randn({n * world, 1, 12, 12});
  auto want = one_process->forward(x1, x2, 0.99);
  want.loss.backward();
  auto got = ranked->forward(x1.narrow(0, rank * n, n), x2.narrow(0, rank * n, n), 0.99);
  got.loss.backward();

  auto loss = got.loss.detach().reshape({1}).clone();
  group->all_reduce(loss, dist::ReduceOp::kAvg);
  EXPECT_NEAR(loss.item<double>(), want.loss.item<double>(), 1e-5) << "rank " << rank;
  const auto names = ranked->trainable_names();
  const auto want_params = one_process->trainable_parameters(), got_params = ranked->trainable_parameters();
  for (size_t i = 0; i < got_params.size(); ++i) {
    auto grad = got_params[i].grad().clone();
    group->all_reduce(grad, dist::ReduceOp::kAvg);
    EXPECT_TRUE(torch::allclose(grad, want_params[i].grad(), 1e-3, 1e-5))
        << names[i] << " on rank " << rank << ": max difference "
        << (grad - want_params[i].grad()).abs().max().item<double>();
  }
  const auto want_buffers = one_process->named_buffers(), got_buffers = ranked->named_buffers();
  for (const auto& item : got_buffers) {
    if (item.value().scalar_type() != torch::kFloat) continue;  // num_batches_tracked
    EXPECT_TRUE(torch::allclose(item.value(), want_buffers[item.key()], 1e-4, 1e-5))
        << item.key() << " on rank " << rank;
  }
}

// A checkpoint holds one model: BN running statistics, rank-local while training (each rank
// normalises its own batch), are rank 0's on every rank after before_save (and before_eval), so that
// the replicated entries written by whichever rank are the same. Also under mpirun (mpi.np2, mpi.np4).
// debug.anomaly_detection is a key every method reads: v3 switches autograd's anomaly mode as v1/v2 do.
TEST(MocoV3Test, AnomalyDetectionFollowsItsKey) {
  for (const bool on : {true, false}) {
    run::Config config;
    config.model.method = moco_v3::kMethod;
    config.model.width = 0.125;
    config.model.dim = 8;
    moco_v3::settings(config).mlp_dim = 16;
    config.debug.anomaly_detection = on;
    run::RunContext context;
    context.group = std::make_shared<dist::LocalProcessGroup>();
    moco_v3::MocoV3 method(config, context, /*in_channels=*/1);
    EXPECT_EQ(torch::autograd::AnomalyMode::is_enabled(), on);
  }
}

TEST(DistMocoV3Test, BeforeSaveGivesEveryRankRank0sBuffers) {
  auto group = test_world_group();
  run::Config config;
  config.model.method = moco_v3::kMethod;
  config.model.width = 0.125;
  config.model.dim = 8;
  moco_v3::settings(config).mlp_dim = 16;
  run::RunContext context;
  context.group = group;
  moco_v3::MocoV3 method(config, context, /*in_channels=*/1);
  for (const auto& b : method.model()->buffers()) b.fill_(group->rank() + 1);
  method.before_save();
  for (const auto& entry : method.state_entries()) {
    if (entry.name.find("running_var") == std::string::npos) continue;
    EXPECT_TRUE(torch::all(entry.tensor == 1).item<bool>()) << entry.name << " on rank " << group->rank();
  }
}

// main_moco.py's views, the same for every v3 recipe: augmentation1 for the query, augmentation2 (a
// rarer blur, then solarize) for the key, with the crop, jitter, grey and flip of both.
const std::vector<constant_table::Constant> kV3Views = {
    {"data.image_size", "224", "main_moco.py RandomResizedCrop(224)"},
    {"data.saturation", "0.2", "main_moco.py ColorJitter(0.4, 0.4, 0.2, 0.1)"},
    {"data.hue", "0.1", "main_moco.py ColorJitter(0.4, 0.4, 0.2, 0.1)"},
    {"data.jitter_prob", "0.8", "main_moco.py RandomApply([ColorJitter], p=0.8)"},
    {"data.grayscale_prob", "0.2", "main_moco.py RandomGrayscale(p=0.2)"},
    {"data.brightness", "0.4", "main_moco.py ColorJitter(0.4, 0.4, 0.2, 0.1)"},
    {"data.contrast", "0.4", "main_moco.py ColorJitter(0.4, 0.4, 0.2, 0.1)"},
    {"data.flip_prob", "0.5", "main_moco.py RandomHorizontalFlip()"},
    {"data.augmentation", "v3", "main_moco.py TwoCropsTransform(augmentation1, augmentation2)"},
    {"data.blur_prob", "1.0", "main_moco.py augmentation1 RandomApply([GaussianBlur([.1, 2.])], p=1.0)"},
    {"data.solarize_prob", "0", "main_moco.py augmentation1 has no Solarize"},
    {"data.key_blur_prob", "0.1", "main_moco.py augmentation2 RandomApply([GaussianBlur([.1, 2.])], p=0.1)"},
    {"data.key_solarize_prob", "0.2", "main_moco.py augmentation2 RandomApply([Solarize()], p=0.2)"},
    {"data.blur_sigma", "[0.1, 2.0]", "moco/loader.py GaussianBlur(sigma=[.1, 2.])"},
};

// configs/moco_v3_r50_imagenet.yaml against facebookresearch/moco-v3's CONFIG.md (R50, 100 epochs)
// and main_moco.py's defaults, row by row with its source; then the lr its schedule gives. The
// augmentation's order (the key view's blur, then its solarize, then the flip) is pinned by
// ViewAugmentTest.V3SolarizesAfterTheBlurAndBeforeTheFlip, its pixels against Pillow by
// data.augment_parity_torchvision.
TEST(PaperConfigTest, MocoV3R50IsTheOfficialRecipe) {
  using constant_table::Constant;
  std::vector<Constant> official = {
      {"model.method", "v3", "MoCo v3"},
      {"model.arch", "resnet50", "main_moco.py -a resnet50 (default)"},
      {"model.small_stem", "false", "torchvision's resnet50"},
      {"model.zero_init_residual", "true", "main_moco.py line 186: torchvision resnet50(zero_init_residual=True)"},
      {"model.dim", "256", "main_moco.py --moco-dim 256"},
      {"v3.mlp_dim", "4096", "main_moco.py --moco-mlp-dim 4096"},
      {"v3.projector_layers", "2", "moco/builder.py MoCo_ResNet _build_mlp(2, hidden_dim, mlp_dim, dim)"},
      {"v3.predictor_layers", "2", "moco/builder.py MoCo_ResNet _build_mlp(2, dim, mlp_dim, dim, False)"},
      {"v3.predictor_last_bn", "false", "moco/builder.py line 109: MoCo_ResNet passes last_bn=False"},
      {"v3.momentum", "0.99", "main_moco.py --moco-m 0.99 with --moco-m-cos (CONFIG.md R50 100 ep)"},
      {"v3.temperature", "1", "main_moco.py --moco-t 1.0"},
      {"optim.optimizer", "lars", "main_moco.py --optimizer lars"},
      {"optim.base_lr", "0.6", "main_moco.py --lr 0.6 (x batch/256)"},
      {"optim.batch_size", "4096", "main_moco.py -b 4096"},
      {"optim.momentum", "0.9", "main_moco.py --momentum 0.9"},
      {"optim.weight_decay", "1e-06", "main_moco.py --wd 1e-6"},
      {"optim.warmup_epochs", "10", "main_moco.py --warmup-epochs 10"},
      {"optim.schedule", "cosine", "main_moco.py adjust_learning_rate: cosine after the warm-up"},
      {"optim.lr_update", "step", "main_moco.py adjust_learning_rate at epoch + i / iters_per_epoch"},
      {"train.epochs", "100", "CONFIG.md R50 100-epoch; main_moco.py --epochs 100"},
      {"data.crop_scale_min", "0.2", "CONFIG.md --crop-min=.2"},
      {"data.transforms", "pil", "main_moco.py: torchvision's transforms on ImageFolder's PIL images"},
      {"train.precision", "fp16", "main_moco.py: torch.cuda.amp.autocast(True), torch.cuda.amp.GradScaler()"},
  };
  official.insert(official.end(), kV3Views.begin(), kV3Views.end());
  const auto c = run::load_config(moco::app::methods(), constant_table::config_path("moco_v3_r50_imagenet.yaml"));
  constant_table::expect_constants(c, official, "moco_v3_r50_imagenet.yaml");
  // init_lr = 0.6 x 4096 / 256 = 9.6: linear over 10 warm-up epochs, then a cosine over the other 90.
  EXPECT_NEAR(train::learning_rate(c, 5), 4.8, 1e-12);
  EXPECT_NEAR(train::learning_rate(c, 10), 9.6, 1e-12);
  EXPECT_NEAR(train::learning_rate(c, 55), 4.8, 1e-12);
  EXPECT_NEAR(train::learning_rate(c, 100), 0.0, 1e-12);
}

// configs/moco_v3_r50_{300,1000}ep_imagenet.yaml are the 100-epoch recipe but for CONFIG.md's flags:
// "ResNet-50, 300-epoch" --lr=.3 --epochs=300; "ResNet-50, 1000-epoch" --lr=.3 --wd=1.5e-6
// --epochs=1000 --moco-m=0.996 (each with --moco-m-cos --crop-min=.2, as the 100-epoch one).
TEST(PaperConfigTest, MocoV3R50LongerRecipesDifferOnlyInTheirFlags) {
  struct Flags {
    const char* file;
    int64_t epochs;
    double lr, weight_decay, momentum;
  };
  for (const auto& f : {Flags{"moco_v3_r50_300ep_imagenet.yaml", 300, 0.3, 1e-6, 0.99},
                        Flags{"moco_v3_r50_1000ep_imagenet.yaml", 1000, 0.3, 1.5e-6, 0.996}}) {
    auto expected = run::load_config(moco::app::methods(), constant_table::config_path("moco_v3_r50_imagenet.yaml"));
    expected.train.epochs = f.epochs;
    expected.optim.base_lr = f.lr;
    expected.optim.weight_decay = f.weight_decay;
    moco_v3::settings(expected).momentum = f.momentum;
    auto got = run::load_config(moco::app::methods(), constant_table::config_path(f.file));
    got.train.output_dir = expected.train.output_dir;  // each run its own folder
    EXPECT_EQ(run::to_yaml(got), run::to_yaml(expected)) << f.file;
  }
}

namespace {

// configs/moco_v3_vit_{small,base}_imagenet.yaml against CONFIG.md's ViT recipes (300 epochs, AdamW)
// and main_moco.py's defaults, row by row with its source; then the lr their schedule gives.
std::vector<constant_table::Constant> official_vit_recipe(const char* arch) {
  std::vector<constant_table::Constant> table = {
      {"model.method", "v3", "MoCo v3"},
      {"model.arch", arch, "CONFIG.md main_moco.py -a vit_small / -a vit_base; vits.py (patch 16, 12 heads)"},
      {"model.dim", "256", "main_moco.py --moco-dim 256"},
      {"v3.mlp_dim", "4096", "main_moco.py --moco-mlp-dim 4096"},
      {"v3.projector_layers", "3", "moco/builder.py MoCo_ViT _build_mlp(3, hidden_dim, mlp_dim, dim)"},
      {"v3.predictor_layers", "2", "moco/builder.py MoCo_ViT _build_mlp(2, dim, mlp_dim, dim)"},
      {"v3.predictor_last_bn", "true", "moco/builder.py lines 36, 122: MoCo_ViT keeps _build_mlp's last_bn=True"},
      {"model.zero_init_residual", "false", "a ViT has no residual BatchNorm (main_moco.py's flag is for ResNets)"},
      {"v3.momentum", "0.99", "main_moco.py --moco-m 0.99 with --moco-m-cos (CONFIG.md ViT)"},
      {"v3.temperature", "0.2", "CONFIG.md ViT --moco-t=.2"},
      {"v3.stop_grad_conv1", "true", "CONFIG.md ViT --stop-grad-conv1"},
      {"optim.optimizer", "adamw", "CONFIG.md ViT --optimizer=adamw"},
      {"optim.base_lr", "1.5e-4", "CONFIG.md ViT --lr=1.5e-4 (x batch/256, main_moco.py)"},
      {"optim.batch_size", "4096", "main_moco.py -b 4096 (CONFIG.md's released ViT models: batch 4096)"},
      {"optim.weight_decay", "0.1", "CONFIG.md ViT --weight-decay=.1"},
      {"optim.warmup_epochs", "40", "CONFIG.md ViT --warmup-epochs=40"},
      {"optim.schedule", "cosine", "main_moco.py adjust_learning_rate: cosine after the warm-up"},
      {"optim.lr_update", "step", "main_moco.py adjust_learning_rate at epoch + i / iters_per_epoch"},
      {"train.epochs", "300", "CONFIG.md: all ViT models are pre-trained for 300 epochs"},
      {"data.crop_scale_min", "0.08", "main_moco.py --crop-min 0.08 (default; the ViT commands leave it)"},
      {"train.precision", "fp16", "main_moco.py: torch.cuda.amp.autocast(True), torch.cuda.amp.GradScaler()"},
  };
  table.insert(table.end(), kV3Views.begin(), kV3Views.end());
  return table;
}

void expect_vit_recipe(const char* file, const char* arch) {
  const auto c = run::load_config(moco::app::methods(), constant_table::config_path(file));
  constant_table::expect_constants(c, official_vit_recipe(arch), file);
  // init_lr = 1.5e-4 x 4096 / 256 = 2.4e-3: linear over 40 warm-up epochs, then a cosine over 260.
  EXPECT_NEAR(train::learning_rate(c, 20), 1.2e-3, 1e-15);
  EXPECT_NEAR(train::learning_rate(c, 40), 2.4e-3, 1e-15);
  EXPECT_NEAR(train::learning_rate(c, 170), 1.2e-3, 1e-15);
  EXPECT_NEAR(train::learning_rate(c, 300), 0.0, 1e-15);
}

}  // namespace

TEST(PaperConfigTest, MocoV3VitSmallIsTheOfficialRecipe) {
  expect_vit_recipe("moco_v3_vit_small_imagenet.yaml", "vit_small");
}

TEST(PaperConfigTest, MocoV3VitBaseIsTheOfficialRecipe) {
  expect_vit_recipe("moco_v3_vit_base_imagenet.yaml", "vit_base");
}
