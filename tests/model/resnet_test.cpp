#include "model/autocast.h"
#include "model/resnet.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using moco::model::ResNet;
using moco::model::resnet_options_for;
using moco::model::ResNetOptions;

namespace {

using ShapeMap = std::map<std::string, std::vector<int64_t>>;

// Written by tools/gen_torchvision_keys.py from Debian's torchvision.
ShapeMap read_torchvision_keys(const std::string& name) {
  const std::string path = std::string(MOCO_TEST_DATA_DIR) + "/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  ShapeMap keys;
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    std::vector<int64_t> shape;
    std::stringstream dims(line.substr(tab + 1));
    for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
    keys[line.substr(0, tab)] = shape;
  }
  return keys;
}

ShapeMap state_keys(torch::nn::Module& module) {
  ShapeMap keys;
  for (const auto& p : module.named_parameters()) keys[p.key()] = p.value().sizes().vec();
  for (const auto& b : module.named_buffers()) keys[b.key()] = b.value().sizes().vec();
  return keys;
}

void expect_same_keys(const ShapeMap& expected, const ShapeMap& actual) {
  EXPECT_EQ(expected.size(), actual.size());
  for (const auto& [key, shape] : expected) {
    auto it = actual.find(key);
    if (it == actual.end()) {
      ADD_FAILURE() << "missing " << key;
      continue;
    }
    EXPECT_EQ(shape, it->second) << key;
  }
  for (const auto& [key, shape] : actual) EXPECT_TRUE(expected.count(key)) << "extra " << key;
}

ResNetOptions imagenet(const std::string& arch, bool mlp) {
  auto o = resnet_options_for(arch);
  o.out_dim = mlp ? 128 : 1000;
  o.mlp_head = mlp;
  return o;
}

}  // namespace

TEST(ResNetTest, Resnet18NamesAndShapesEqualTorchvision) {
  ResNet net(imagenet("resnet18", false));
  expect_same_keys(read_torchvision_keys("torchvision_resnet18.tsv"), state_keys(*net));
}

TEST(ResNetTest, Resnet34NamesAndShapesEqualTorchvision) {
  ResNet net(imagenet("resnet34", false));
  expect_same_keys(read_torchvision_keys("torchvision_resnet34.tsv"), state_keys(*net));
}

TEST(ResNetTest, Resnet50NamesAndShapesEqualTorchvision) {
  ResNet net(imagenet("resnet50", false));
  expect_same_keys(read_torchvision_keys("torchvision_resnet50.tsv"), state_keys(*net));
}

TEST(ResNetTest, MlpHeadNamesEqualMocoV2Reference) {
  ResNet r18(imagenet("resnet18", true));
  expect_same_keys(read_torchvision_keys("torchvision_resnet18_mlp.tsv"), state_keys(*r18));
  ResNet r34(imagenet("resnet34", true));
  expect_same_keys(read_torchvision_keys("torchvision_resnet34_mlp.tsv"), state_keys(*r34));
  ResNet r50(imagenet("resnet50", true));
  expect_same_keys(read_torchvision_keys("torchvision_resnet50_mlp.tsv"), state_keys(*r50));
}

TEST(ResNetTest, TinyIsAboutOneMillionParametersAndRunsOnGrayscale) {
  auto o = resnet_options_for("resnet_tiny");
  o.in_channels = 1;
  o.small_stem = true;
  ResNet net(o);
  const auto n = moco::model::count_parameters(*net);
  EXPECT_GT(n, 800'000);
  EXPECT_LT(n, 1'500'000);
  const auto x = torch::randn({4, 1, 28, 28});
  EXPECT_EQ(net->forward(x).sizes(), (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(net->features(x).sizes(), (std::vector<int64_t>{4, 256}));
  EXPECT_EQ(net->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{32, 1, 3, 3}));
}

TEST(ResNetTest, SmallStemIsA3x3ConvWithoutDownsampling) {
  auto o = resnet_options_for("resnet18");
  o.width = 0.25;
  ResNet standard(o);
  o.small_stem = true;
  ResNet small(o);
  EXPECT_EQ(standard->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 7, 7}));
  EXPECT_EQ(small->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 3, 3}));
  // The stem's output keeps the input's resolution with the small stem and halves it otherwise.
  torch::NoGradGuard no_grad;
  small->eval();
  standard->eval();
  auto stem = [](ResNet& net, const torch::Tensor& x) {
    auto children = net->named_children();
    return children["bn1"]->as<moco::model::SplitBatchNorm2d>()->forward(
        children["conv1"]->as<torch::nn::Conv2d>()->forward(x));
  };
  const auto x = torch::randn({1, 3, 32, 32});
  EXPECT_EQ(stem(small, x).size(2), 32);
  EXPECT_EQ(stem(standard, x).size(2), 16);
  o.small_stem_stride = 2;  // the fast variant: the same 3x3 weights, half the resolution
  ResNet strided(o);
  strided->eval();
  EXPECT_EQ(strided->named_parameters()["conv1.weight"].sizes(), (std::vector<int64_t>{16, 3, 3, 3}));
  EXPECT_EQ(stem(strided, x).size(2), 16);
  EXPECT_EQ(strided->features(x).sizes(), (std::vector<int64_t>{1, 128}));
}

// torchvision's resnetN(zero_init_residual=True) zeroes the weight of each residual branch's last BN
// (bn2 of a BasicBlock, bn3 of a Bottleneck): tests/fixtures/torchvision_zero_init_residual.tsv lists the
// tensors it changes (tools/gen_torchvision_keys.py, from Debian's torchvision). The option zeroes
// exactly those, and leaves everything else bit for bit as the default build from the same seed (it
// draws nothing); off by default.
TEST(ResNetTest, ZeroInitResidualZeroesWhatTorchvisionZeroes) {
  std::map<std::string, std::set<std::string>> torchvision;
  std::ifstream in(std::string(MOCO_TEST_DATA_DIR) + "/torchvision_zero_init_residual.tsv");
  for (std::string arch, key; in >> arch >> key;) torchvision[arch].insert(key);
  EXPECT_FALSE(ResNetOptions{}.zero_init_residual);
  for (const std::string arch : {"resnet18", "resnet34", "resnet50"}) {
    auto o = resnet_options_for(arch);
    o.width = 0.25;  // the names do not depend on it
    torch::manual_seed(0);
    ResNet plain(o);
    o.zero_init_residual = true;
    torch::manual_seed(0);
    ResNet zeroed(o);
    auto zeroed_tensors = zeroed->named_parameters();
    for (const auto& b : zeroed->named_buffers()) zeroed_tensors.insert(b.key(), b.value());
    auto plain_tensors = plain->named_parameters();
    for (const auto& b : plain->named_buffers()) plain_tensors.insert(b.key(), b.value());
    ASSERT_EQ(plain_tensors.size(), zeroed_tensors.size());
    std::set<std::string> changed;
    for (const auto& item : plain_tensors) {
      const auto& z = zeroed_tensors[item.key()];
      if (torch::equal(item.value(), z)) continue;
      changed.insert(item.key());
      EXPECT_FALSE(z.any().item<bool>()) << arch << " " << item.key() << " changed but is not zero";
    }
    EXPECT_EQ(changed, torchvision[arch]) << arch;
    EXPECT_EQ(changed.size(), arch == "resnet18" ? 8u : 16u) << arch;
  }
}

TEST(ResNetTest, UnknownArchitectureIsAClearError) {
  try {
    resnet_options_for("resnet19");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("resnet19"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("resnet50"), std::string::npos);
  }
}

// model.activation_checkpointing: a ResNet's stages run again in backward. In train mode (BatchNorm
// over the batch, fp32 and bf16) the input's and every parameter's gradients are bit for bit those
// without it, and so are the running statistics after two steps' forwards and backwards: the
// recomputation normalises with the forward's statistics and moves them no further.
TEST(ResNetTest, CheckpointedStagesGiveTheSameGradientsAndStatisticsBitForBit) {
  for (const bool bf16 : {false, true}) {
    auto o = resnet_options_for("resnet18");
    o.in_channels = 2;
    o.small_stem = true;
    o.width = 0.125;
    auto with = o;
    with.activation_checkpointing = true;
    torch::manual_seed(3);
    ResNet plain(o);
    torch::manual_seed(3);
    ResNet checkpointed(with);
    const auto weights = torch::randn({4, plain->feature_dim()});
    for (int step = 0; step < 2; ++step) {
      const auto x = torch::randn({4, 2, 16, 16});
      std::vector<torch::Tensor> inputs;
      for (auto* net : {&plain, &checkpointed}) {
        (*net)->zero_grad();
        auto input = x.clone().requires_grad_(true);
        torch::Tensor loss;
        {
          const moco::model::AutocastGuard autocast(torch::kCPU, bf16);
          loss = ((*net)->features(input).to(torch::kFloat) * weights).sum();
        }
        loss.backward();
        inputs.push_back(input);
      }
      const std::string at = std::string(bf16 ? "bf16" : "fp32") + ", step " + std::to_string(step);
      EXPECT_TRUE(torch::equal(inputs[0].grad(), inputs[1].grad())) << at;
      const auto want = plain->named_parameters(), got = checkpointed->named_parameters();
      for (const auto& item : want) {
        if (!item.value().grad().defined()) continue;  // the head: features() does not use it
        ASSERT_TRUE(got[item.key()].grad().defined()) << item.key();
        EXPECT_TRUE(torch::equal(got[item.key()].grad(), item.value().grad())) << item.key() << ", " << at;
      }
      const auto want_buffers = plain->named_buffers();
      for (const auto& item : checkpointed->named_buffers())
        EXPECT_TRUE(torch::equal(item.value(), want_buffers[item.key()])) << item.key() << ", " << at;
    }
  }
}
