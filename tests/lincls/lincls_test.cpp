// The linear protocol (src/lincls): top-1/top-5 against a plain loop, the classifier learning
// linearly separable features, the backbone sources (random init = MoCo's, an export of another
// architecture refused naming the tensor) and the sanity check catching a changed backbone.
#include "ckpt/h5_tensor_file.h"
#include "app/methods.h"
#include "moco_v2/v2_settings.h"
#include "moco_v3/v3_settings.h"
#include "data/augment.h"
#include "data/synthetic.h"
#include "lincls/frozen_backbone.h"
#include "lincls/linear_classifier.h"
#include "lincls/views.h"
#include "moco_v2/moco.h"
#include "test_world.h"
#include "run/config.h"
#include "run/setup.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <set>

using namespace moco;
namespace fs = std::filesystem;

namespace {

// Counts by the definition: the label's logit beaten by no other class (top-1), by fewer than
// min(5, classes) (top-5).
lincls::TopK plain_topk(const torch::Tensor& logits, const torch::Tensor& labels) {
  lincls::TopK t;
  const auto l = logits.accessor<float, 2>();
  for (int64_t i = 0; i < logits.size(0); ++i) {
    const int64_t label = labels[i].item<int64_t>();
    int64_t above = 0;
    for (int64_t j = 0; j < logits.size(1); ++j) above += l[i][j] > l[i][label];
    t.correct1 += above == 0;
    t.correct5 += above < std::min<int64_t>(5, logits.size(1));
    ++t.total;
  }
  return t;
}

run::Config tiny_config(const std::string& pretrained) {
  run::Config c;
  c.methods = moco::app::methods();
  c.model.method = moco_v2::kMethod;
  c.model.arch = run::Arch::kResnetTiny;
  c.model.width = 0.25;
  moco_v2::settings(c).mlp = true;
  c.data.dataset = run::Dataset::kSynthetic;
  c.data.augment.out_size = 16;
  c.train.seed = 7;
  c.model.pretrained = pretrained;
  return c;
}

// A model.pretrained file as `moco_ckpt export` writes one: the backbone's tensors at the root.
std::string write_export(const std::string& name, model::Backbone net) {
  const auto path = (fs::temp_directory_path() / name).string();
  ckpt::H5TensorWriter out(path);
  for (const auto& [key, tensor] : lincls::backbone_tensors(*net)) out.write(key, tensor);
  out.close();
  return path;
}

// MoCo v3's CPU-sized ViT (patch 4, dim 64, 4 blocks) on 16 px synthetic images: 17 tokens.
run::Config vit_config(const std::string& pretrained) {
  auto c = tiny_config(pretrained);
  c.model.method = moco_v3::kMethod;
  c.model.arch = run::Arch::kVitTinyCpu;
  c.method_settings.keep_only(moco_v3::kMethod);
  return c;
}

// Ten well separated classes in 32 dimensions: class means 4 apart, unit noise.
std::pair<torch::Tensor, torch::Tensor> separable(int64_t n, uint64_t seed) {
  torch::manual_seed(99);
  const auto means = 4.0 * torch::randn({10, 32});
  torch::manual_seed(seed);
  const auto labels = torch::arange(n, torch::kLong) % 10;
  return {means.index_select(0, labels) + torch::randn({n, 32}), labels};
}

}  // namespace

TEST(LinclsTest, TopKMatchesAPlainLoop) {
  torch::manual_seed(3);
  for (int64_t classes : {3, 10, 17}) {
    const auto logits = torch::randn({300, classes});
    const auto labels = torch::randint(classes, {300}, torch::kLong);
    const auto fast = lincls::topk_correct(logits, labels), slow = plain_topk(logits, labels);
    EXPECT_EQ(fast.correct1, slow.correct1) << classes << " classes";
    EXPECT_EQ(fast.correct5, slow.correct5) << classes << " classes";
    EXPECT_EQ(fast.total, 300);
    EXPECT_GT(fast.correct5, fast.correct1);
  }
}

// Under mpirun (mpi.np2/np4) each rank scores its shard: the summed counts must be the plain loop's
// over the whole set, whatever the chunk size.
TEST(DistLinclsTest, EvaluationCountsMatchAPlainLoopOverEveryRank) {
  auto group = test_world_group();
  lincls::LinearClassifier classifier(32, 10, 0.9, 0, group, 1, torch::kCPU);
  const auto [features, labels] = separable(203, 5);
  const auto expected = plain_topk(classifier.predict(features), labels);
  for (int64_t chunk : {7, 64, 1000}) {
    const auto got = lincls::evaluate_classifier(classifier, features, labels, *group, chunk);
    EXPECT_EQ(got.correct1, expected.correct1) << "chunk " << chunk;
    EXPECT_EQ(got.correct5, expected.correct5) << "chunk " << chunk;
    EXPECT_EQ(got.total, 203);
  }
}

// Each rank steps on its share of the global batch; the averaged gradients make every rank's fc the
// one a single process gets from the whole batch.
TEST(DistLinclsTest, StepsOnSharesEqualOneProcessOnTheGlobalBatch) {
  auto group = test_world_group();
  const int world = group->world_size(), rank = group->rank();
  const auto [features, labels] = separable(24 * world, 11);
  lincls::LinearClassifier mine(32, 10, 0.9, 1e-4, group, 4, torch::kCPU);
  lincls::LinearClassifier alone(32, 10, 0.9, 1e-4, std::make_shared<dist::LocalProcessGroup>(), 4, torch::kCPU);
  for (int step = 0; step < 3; ++step) {
    mine.step(features.narrow(0, rank * 24, 24), labels.narrow(0, rank * 24, 24), 0.5);
    alone.step(features, labels, 0.5);
  }
  EXPECT_TRUE(torch::allclose(mine.fc()->weight, alone.fc()->weight, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(mine.fc()->bias, alone.fc()->bias, 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(mine.fc()->weight,
                               lincls::LinearClassifier(32, 10, 0.9, 1e-4, group, 4, torch::kCPU).fc()->weight));
}

// The last partial batch of an epoch (5 images a rank, against 24 in the others): one SGD step on it
// is the step of the mean loss over its images, by hand from the per-image losses' summed
// gradient, and on 2 ranks the same as 1 process on the whole partial batch.
TEST(DistLinclsTest, APartialBatchStepsOnTheMeanOverItsImages) {
  auto group = test_world_group();
  const int world = group->world_size(), rank = group->rank();
  const int64_t share = 5, n = share * world;
  const auto [features, labels] = separable(n, 12);
  lincls::LinearClassifier mine(32, 10, /*momentum=*/0, /*weight_decay=*/0, group, 4, torch::kCPU);
  const auto w = mine.fc()->weight.detach().clone().requires_grad_(true);
  const auto b = mine.fc()->bias.detach().clone().requires_grad_(true);
  const auto per_image =
      torch::nn::functional::cross_entropy(torch::nn::functional::linear(features, w, b), labels,
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  per_image.sum().backward();
  const double lr = 0.5;
  const double loss =
      mine.step(features.narrow(0, rank * share, share), labels.narrow(0, rank * share, share), lr).item<double>();
  EXPECT_NEAR(loss, per_image.narrow(0, rank * share, share).mean().item<double>(), 1e-6);
  EXPECT_TRUE(torch::allclose(mine.fc()->weight, w.detach() - lr * w.grad() / static_cast<double>(n), 1e-5, 1e-7));
  EXPECT_TRUE(torch::allclose(mine.fc()->bias, b.detach() - lr * b.grad() / static_cast<double>(n), 1e-5, 1e-7));
}

TEST(LinclsTest, ClassifierLearnsLinearlySeparableFeatures) {
  const auto [train_x, train_y] = separable(2000, 1);
  const auto [test_x, test_y] = separable(500, 2);
  auto group = std::make_shared<dist::LocalProcessGroup>();
  lincls::LinearClassifier classifier(32, 10, 0.9, 0, group, 0, torch::kCPU);
  const double before = lincls::evaluate_classifier(classifier, test_x, test_y, *group, 256).top1();
  double first_loss = 0, last_loss = 0;
  for (int epoch = 0; epoch < 5; ++epoch)
    for (int64_t start = 0; start < 2000; start += 100) {
      last_loss = classifier.step(train_x.narrow(0, start, 100), train_y.narrow(0, start, 100), 0.01).item<double>();
      if (epoch == 0 && start == 0) first_loss = last_loss;
    }
  const double after = lincls::evaluate_classifier(classifier, test_x, test_y, *group, 256).top1();
  EXPECT_LT(before, 50.0);
  EXPECT_GT(after, 98.0);
  EXPECT_LT(last_loss, first_loss / 10);
}

TEST(LinclsTest, StandardizationIsAppliedBeforeTheLayer) {
  auto group = std::make_shared<dist::LocalProcessGroup>();
  lincls::LinearClassifier classifier(4, 3, 0.9, 0, group, 0, torch::kCPU);
  const auto x = torch::randn({5, 4});
  const auto mean = torch::tensor({1.0f, -2.0f, 0.5f, 3.0f}), std = torch::tensor({2.0f, 0.5f, 1.0f, 4.0f});
  classifier.set_standardization(mean, std);
  const auto expected = torch::nn::functional::linear((x - mean) / std, classifier.fc()->weight, classifier.fc()->bias);
  EXPECT_TRUE(torch::allclose(classifier.predict(x), expected));
}

TEST(LinclsTest, RandomInitIsTheEncoderMocoTrainingStartsFrom) {
  const auto c = tiny_config("random");
  auto options = model::resnet_options_for(run::to_string(c.model.arch));
  options.in_channels = 1;
  options.small_stem = c.model.small_stem;
  options.width = c.model.width;
  options.out_dim = c.model.dim;
  options.mlp_head = moco_v2::settings(c).mlp;
  options.bn_splits = 8;  // as the trainer builds it; BatchNorm groups draw nothing
  moco_v2::MocoOptions moco_options;
  moco_options.queue_size = 256;
  moco_v2::Moco moco(options, moco_options, std::make_shared<dist::LocalProcessGroup>(), c.train.seed);
  const auto backbone = lincls::Backbone::load(c, torch::kCPU);
  EXPECT_EQ(backbone.kind(), lincls::Backbone::Kind::kRandomInit);
  const auto expected = lincls::backbone_tensors(*moco->encoder_q);
  const auto got = lincls::backbone_tensors(*backbone.net());
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, expected[i].first);
    EXPECT_TRUE(torch::equal(got[i].second, expected[i].second)) << got[i].first;
  }
  EXPECT_EQ(backbone.check_unchanged(c), static_cast<int64_t>(got.size()));
}

TEST(LinclsTest, PretrainedExportLoadsAndTheSanityCheckCatchesAChangedBackbone) {
  auto source_config = tiny_config("random");
  source_config.train.seed = 123;  // other weights than the network load() starts from
  auto source = lincls::Backbone::load(source_config, torch::kCPU);
  {
    // Trained-looking BatchNorm statistics, so that a forward in train mode visibly moves them.
    torch::NoGradGuard no_grad;
    for (auto& [key, tensor] : lincls::backbone_tensors(*source.net()))
      if (key.find("running_var") != std::string::npos) tensor.uniform_(0.5, 1.5);
  }
  auto net = source.net();
  const auto path = write_export("lincls_test_export.h5", net);
  const auto backbone = lincls::Backbone::load(tiny_config(path), torch::kCPU);
  EXPECT_EQ(backbone.kind(), lincls::Backbone::Kind::kPretrained);
  for (const auto& [key, tensor] : lincls::backbone_tensors(*backbone.net())) {
    const auto& reference = lincls::backbone_tensors(*source.net());
    const auto it =
        std::find_if(reference.begin(), reference.end(), [&](const auto& item) { return item.first == key; });
    ASSERT_NE(it, reference.end()) << key;
    EXPECT_TRUE(torch::equal(tensor, it->second)) << key;
  }
  EXPECT_FALSE(backbone.net()->is_training());
  const auto images = torch::rand({4, 1, 16, 16});
  const auto features = backbone.features(images);
  EXPECT_EQ(features.size(1), backbone.feature_dim());
  const int64_t tensors = backbone.check_unchanged(tiny_config(path));
  EXPECT_EQ(tensors, static_cast<int64_t>(lincls::backbone_tensors(*backbone.net()).size()));

  // What the protocol forbids: a forward in train mode updates the BatchNorm statistics.
  backbone.net()->train();
  backbone.net()->features(images);
  backbone.net()->eval();
  try {
    backbone.check_unchanged(tiny_config(path));
    FAIL() << "the sanity check missed BatchNorm statistics updated by a train-mode forward";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("bn1.running_mean"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(LinclsTest, PretrainedOfAnotherArchitectureIsRefusedNamingTheTensor) {
  auto source = lincls::Backbone::load(tiny_config("random"), torch::kCPU);
  auto net = source.net();
  const auto path = write_export("lincls_test_other_arch.h5", net);
  auto expect_refusal = [&](run::Config c, const std::string& naming) {
    c.model.pretrained = path;
    try {
      lincls::Backbone::load(c, torch::kCPU);
      FAIL() << "loaded a backbone that does not fit; expected a ConfigError naming " << naming;
    } catch (const run::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(naming), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  auto wider = tiny_config(path);
  wider.model.width = 0.5;  // resnet_tiny at width 0.5: conv1 has 32 filters, not 16
  expect_refusal(wider, "tensor 'conv1.weight' is 16x1x3x3 there, 32x1x3x3 here");
  auto deeper = tiny_config(path);
  deeper.model.arch = run::Arch::kResnet18;
  deeper.model.width = 0.25;
  expect_refusal(deeper, "it has no tensor 'layer1.1.conv1.weight'");
  auto big_stem = tiny_config(path);
  big_stem.model.small_stem = false;  // a 7x7 first convolution
  expect_refusal(big_stem, "tensor 'conv1.weight' is 16x1x3x3 there, 16x1x7x7 here");
  auto missing = tiny_config((fs::temp_directory_path() / "lincls_no_such_checkpoint").string());
  EXPECT_THROW(lincls::Backbone::load(missing, torch::kCPU), run::ConfigError);
  fs::remove(path);
}

// A ViT under timm's names, as `moco_ckpt export` writes one with --keep-head (v3's projector in the
// head's place): every tensor but head.* loads, bitwise; the head is never read; the features are the
// final norm's cls token; the sanity check compares every ViT tensor and names one that changed.
TEST(LinclsTest, VitExportLoadsEveryTimmKeyButTheHeadAndTheSanityCheckCoversIt) {
  auto source_config = vit_config("random");
  source_config.train.seed = 123;  // other weights than the network load() starts from
  auto source = lincls::Backbone::load(source_config, torch::kCPU);
  const auto path = (fs::temp_directory_path() / "lincls_test_vit_export.h5").string();
  {
    ckpt::H5TensorWriter out(path);
    for (const auto& [key, tensor] : lincls::backbone_tensors(*source.net())) out.write(key, tensor);
    out.write("head.0.weight", torch::randn({7, 64}));  // v3's projector: not the backbone's
    out.write("head.weight", torch::randn({3, 5}));
    out.close();
  }
  const auto c = vit_config(path);
  const auto backbone = lincls::Backbone::load(c, torch::kCPU);
  EXPECT_EQ(backbone.kind(), lincls::Backbone::Kind::kPretrained);
  EXPECT_EQ(backbone.feature_dim(), 64);
  const auto reference = lincls::backbone_tensors(*source.net());
  const auto loaded = lincls::backbone_tensors(*backbone.net());
  ASSERT_EQ(loaded.size(), reference.size());
  std::set<std::string> keys;
  for (size_t i = 0; i < loaded.size(); ++i) {
    keys.insert(loaded[i].first);
    EXPECT_EQ(loaded[i].first, reference[i].first);
    EXPECT_TRUE(torch::equal(loaded[i].second, reference[i].second)) << loaded[i].first;
  }
  for (const char* key : {"cls_token", "pos_embed", "patch_embed.proj.weight", "blocks.3.attn.qkv.weight",
                          "blocks.0.mlp.fc2.bias", "norm.weight", "norm.bias"})
    EXPECT_TRUE(keys.count(key)) << key;
  for (const auto& key : keys) EXPECT_NE(key.rfind("head.", 0), 0u) << key;
  EXPECT_FALSE(backbone.net()->is_training());
  for (const auto& p : backbone.net()->parameters()) EXPECT_FALSE(p.requires_grad());
  const auto images = torch::rand({4, 1, 16, 16});
  EXPECT_TRUE(torch::equal(backbone.features(images), source.net()->features(images)));

  EXPECT_EQ(backbone.check_unchanged(c), static_cast<int64_t>(loaded.size()));
  for (const std::string key : {"blocks.2.attn.proj.weight", "cls_token", "norm.bias"}) {
    auto tensor =
        std::find_if(loaded.begin(), loaded.end(), [&](const auto& item) { return item.first == key; })->second;
    const auto kept = tensor.clone();
    {
      torch::NoGradGuard no_grad;
      tensor.view(-1)[0].add_(1e-3);
    }
    try {
      backbone.check_unchanged(c);
      ADD_FAILURE() << "the sanity check missed a changed " << key;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    }
    torch::NoGradGuard no_grad;
    tensor.copy_(kept);
  }
  EXPECT_EQ(backbone.check_unchanged(c), static_cast<int64_t>(loaded.size()));
  fs::remove(path);
}

// An export missing a ViT tensor, holding one the ViT lacks, or built for another image size: refused
// naming the tensor, the file and the keys that decide a ViT's shapes.
TEST(LinclsTest, VitExportThatDoesNotFitIsRefusedNamingTheTensorAndTheFile) {
  auto source = lincls::Backbone::load(vit_config("random"), torch::kCPU);
  auto write = [&](const std::string& name, const std::string& skip, bool extra) {
    const auto path = (fs::temp_directory_path() / name).string();
    ckpt::H5TensorWriter out(path);
    for (const auto& [key, tensor] : lincls::backbone_tensors(*source.net()))
      if (key != skip) out.write(key, tensor);
    if (extra) out.write("blocks.4.norm1.weight", torch::ones({64}));
    out.close();
    return path;
  };
  auto expect_refusal = [&](run::Config c, const std::string& path, const std::string& naming) {
    c.model.pretrained = path;
    try {
      lincls::Backbone::load(c, torch::kCPU);
      ADD_FAILURE() << "loaded a ViT that does not fit; expected a ConfigError naming " << naming;
    } catch (const run::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(naming), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  const auto missing = write("lincls_test_vit_missing.h5", "norm.weight", false);
  expect_refusal(vit_config(""), missing, "it has no tensor 'norm.weight'");
  const auto extra = write("lincls_test_vit_extra.h5", "", true);
  expect_refusal(vit_config(""), extra, "it holds tensor 'blocks.4.norm1.weight', which this network lacks");
  auto larger = vit_config("");
  larger.data.augment.out_size = 32;  // an 8x8 grid of patches: pos_embed 1x65x64
  expect_refusal(larger, extra, "tensor 'pos_embed' is 1x17x64 there, 1x65x64 here");
  expect_refusal(larger, extra, "model.arch=vit_tiny_cpu data.image_size=32");
  expect_refusal(tiny_config(""), extra, "it has no tensor 'conv1.weight'");  // a ResNet config
  fs::remove(missing);
  fs::remove(extra);
}

TEST(LinclsTest, VitRandomInitIsTheSeedsViTAndItsSanityCheckCoversEveryTensor) {
  const auto c = vit_config("random");
  const auto backbone = lincls::Backbone::load(c, torch::kCPU);
  EXPECT_EQ(backbone.kind(), lincls::Backbone::Kind::kRandomInit);
  torch::manual_seed(c.train.seed);
  model::VisionTransformer expected(run::vit_options(c, 1));
  const auto want = lincls::backbone_tensors(*expected), got = lincls::backbone_tensors(*backbone.net());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << got[i].first;
  EXPECT_EQ(backbone.check_unchanged(c), static_cast<int64_t>(got.size()));
}

TEST(LinclsTest, RawPixelsAreTheNormalisedImageFlattened) {
  auto c = tiny_config("raw_pixels");
  const auto backbone = lincls::Backbone::load(c, torch::kCPU);
  EXPECT_EQ(backbone.kind(), lincls::Backbone::Kind::kRawPixels);
  EXPECT_EQ(backbone.feature_dim(), 16 * 16);
  const auto images = torch::rand({3, 1, 16, 16});
  EXPECT_TRUE(torch::equal(backbone.features(images), images.flatten(1)));
  EXPECT_EQ(backbone.check_unchanged(c), 0);
}

TEST(LinclsTest, CenterViewIsTheImageItselfOrItsResizedCentre) {
  data::AugmentOptions o;
  o.out_size = 8;
  o.mean = {0.5};
  o.std = {0.25};
  const auto images = torch::randint(256, {2, 1, 8, 8}, torch::kLong).to(torch::kUInt8);
  EXPECT_TRUE(torch::equal(lincls::center_view(images, o), data::normalize_batch(images, o)));
  // A 16x20 image: the shorter side becomes round(8 * 256/224) = 9, the longer int(9*20/16) = 11;
  // the centre 8x8 is cut out. A constant image stays constant; a left-right ramp keeps its order.
  const auto flat = torch::full({1, 1, 16, 20}, 200, torch::kUInt8);
  const auto view = lincls::center_view(flat, o);
  EXPECT_EQ(view.sizes(), (std::vector<int64_t>{1, 1, 8, 8}));
  EXPECT_TRUE(torch::allclose(view, torch::full({1, 1, 8, 8}, (200 / 255.0 - 0.5) / 0.25)));
  const auto ramp =
      (torch::arange(20, torch::kFloat) * 12).to(torch::kUInt8).view({1, 1, 1, 20}).expand({1, 1, 16, 20}).contiguous();
  const auto columns = lincls::center_view(ramp, o)[0][0][0];
  EXPECT_TRUE(torch::all(columns.narrow(0, 1, 7) > columns.narrow(0, 0, 7)).item<bool>());
}

TEST(LinclsTest, SyntheticTestSplitSharesTheTrainSplitsClasses) {
  const data::SyntheticDataset all(30, 1, 8, 8, 10, 4), test(10, 1, 8, 8, 10, 4, /*first=*/20);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(torch::equal(test.get(i).image, all.get(20 + i).image)) << i;
    EXPECT_EQ(test.get(i).label, all.get(20 + i).label);
  }
}

TEST(LinclsTest, ConfigKeysChangeTheMathOfTheirOwnJobOnly) {
  run::Config a, b;
  b.lincls.base_lr = 0.1;
  b.model.pretrained = "runs/x";
  b.lincls.epochs = 7;
  b.optim.base_lr = 0.5;
  std::map<std::string, bool> moco, lin;
  for (const auto& change : run::config_changes(a, b, run::Job::kMoco)) moco[change.key] = change.changes_math;
  for (const auto& change : run::config_changes(a, b, run::Job::kLincls)) lin[change.key] = change.changes_math;
  EXPECT_FALSE(moco.at("lincls.base_lr"));
  EXPECT_FALSE(moco.at("model.pretrained"));
  EXPECT_FALSE(moco.at("lincls.epochs"));
  EXPECT_TRUE(moco.at("optim.base_lr"));
  EXPECT_TRUE(lin.at("lincls.base_lr"));
  EXPECT_TRUE(lin.at("model.pretrained"));
  EXPECT_FALSE(lin.at("lincls.epochs"));
  EXPECT_FALSE(lin.at("optim.base_lr"));
}
