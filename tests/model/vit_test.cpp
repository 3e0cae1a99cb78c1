// model::VisionTransformer against the official MoCo v3 vits.py (VisionTransformerMoCo on timm's
// VisionTransformer): the sizes of vit_small and vit_base, timm's names, the forward against a
// reference written here from timm's design, the fixed 2-D sin-cos position embedding, the
// initialisation and stop-grad-conv1. The whole v3 step with a ViT against PyTorch:
// moco_v3.step_parity_torch_vit (tests/parity/moco_v3_step_parity.py).
#include "model/autocast.h"
#include "model/vit.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

using moco::model::VisionTransformer;
using moco::model::vit_options_for;
using moco::model::ViTOptions;

namespace {

ViTOptions small_vit(bool stop_grad_conv1 = false) {
  auto o = vit_options_for("vit_tiny_cpu");
  o.image_size = 16;  // a 4x4 grid of patches
  o.in_channels = 2;
  o.depth = 2;
  o.out_dim = 5;
  o.stop_grad_conv1 = stop_grad_conv1;
  return o;
}

torch::Tensor param(VisionTransformer& net, const std::string& name) { return net->named_parameters()[name]; }

torch::Tensor layer_norm(VisionTransformer& net, const torch::Tensor& x, const std::string& prefix) {
  return torch::layer_norm(x, {x.size(-1)}, param(net, prefix + ".weight"), param(net, prefix + ".bias"), 1e-6);
}

torch::Tensor linear(VisionTransformer& net, const torch::Tensor& x, const std::string& prefix) {
  return torch::linear(x, param(net, prefix + ".weight"), param(net, prefix + ".bias"));
}

// timm's VisionTransformer.forward_features written out from the module's own tensors, head by head.
torch::Tensor reference_features(VisionTransformer& net, const torch::Tensor& images) {
  const auto& o = net->options();
  const int64_t heads = o.num_heads, dim = o.embed_dim, head_dim = dim / heads;
  auto x = torch::conv2d(images, param(net, "patch_embed.proj.weight"), param(net, "patch_embed.proj.bias"),
                         {o.patch_size, o.patch_size})
               .flatten(2)
               .transpose(1, 2);
  x = torch::cat({param(net, "cls_token").expand(std::vector<int64_t>{x.size(0), 1, dim}), x}, 1) +
      param(net, "pos_embed");
  for (int64_t b = 0; b < o.depth; ++b) {
    const std::string p = "blocks." + std::to_string(b);
    const auto qkv = linear(net, layer_norm(net, x, p + ".norm1"), p + ".attn.qkv");
    std::vector<torch::Tensor> outs;
    for (int64_t h = 0; h < heads; ++h) {
      const auto q = qkv.narrow(2, h * head_dim, head_dim), k = qkv.narrow(2, dim + h * head_dim, head_dim),
                 v = qkv.narrow(2, 2 * dim + h * head_dim, head_dim);
      outs.push_back(torch::softmax(q.bmm(k.transpose(1, 2)) / std::sqrt(double(head_dim)), -1).bmm(v));
    }
    x = x + linear(net, torch::cat(outs, 2), p + ".attn.proj");
    const auto hidden = torch::gelu(linear(net, layer_norm(net, x, p + ".norm2"), p + ".mlp.fc1"));
    x = x + linear(net, hidden, p + ".mlp.fc2");
  }
  return layer_norm(net, x, "norm").select(1, 0);
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

}  // namespace

// vits.py: vit_small is patch 16, dim 384, depth 12, 12 heads (not DeiT's 6), mlp ratio 4; vit_base
// 768, 12, 12.
TEST(VitTest, ArchitecturesAreVitsPys) {
  const auto s = vit_options_for("vit_small");
  EXPECT_EQ(s.patch_size, 16);
  EXPECT_EQ(s.embed_dim, 384);
  EXPECT_EQ(s.depth, 12);
  EXPECT_EQ(s.num_heads, 12);
  EXPECT_EQ(s.mlp_ratio, 4);
  const auto b = vit_options_for("vit_base");
  EXPECT_EQ(b.patch_size, 16);
  EXPECT_EQ(b.embed_dim, 768);
  EXPECT_EQ(b.depth, 12);
  EXPECT_EQ(b.num_heads, 12);
  try {
    vit_options_for("vit_huge");
    FAIL() << "an unknown name was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("vit_small, vit_base, vit_tiny_cpu"), std::string::npos) << e.what();
  }
}

// timm's state_dict keys and shapes: ViT-S/16 at 224 px holds 22,050,664 parameters with a 1000-way
// head (timm's vit_small_patch16_224 count), the position embedding's 197 x 384 included.
TEST(VitTest, NamesAndSizesAreTimms) {
  VisionTransformer net(small_vit());
  std::set<std::string> names;
  for (const auto& item : net->named_parameters()) names.insert(item.key());
  std::set<std::string> expected{
      "cls_token",   "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight", "norm.bias",
      "head.weight", "head.bias"};
  for (const char* block : {"blocks.0.", "blocks.1."})
    for (const char* layer : {"norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"})
      for (const char* kind : {".weight", ".bias"}) expected.insert(std::string(block) + layer + kind);
  EXPECT_EQ(names, expected);
  EXPECT_TRUE(net->named_buffers().is_empty());
  EXPECT_EQ(param(net, "pos_embed").sizes(), (std::vector<int64_t>{1, 17, 64}));
  EXPECT_EQ(param(net, "blocks.1.attn.qkv.weight").sizes(), (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(param(net, "blocks.1.mlp.fc1.weight").sizes(), (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(param(net, "patch_embed.proj.weight").sizes(), (std::vector<int64_t>{64, 2, 4, 4}));
  VisionTransformer vit_s(vit_options_for("vit_small"));
  int64_t count = 0;
  for (const auto& p : vit_s->parameters()) count += p.numel();
  EXPECT_EQ(count, 22050664);
}

// Features are the final LayerNorm's cls token after the pre-norm blocks, as timm computes them.
TEST(VitTest, FeaturesAreTimmsNormedClsToken) {
  torch::manual_seed(1);
  VisionTransformer net(small_vit());
  {
    torch::NoGradGuard no_grad;  // weights off their initialisation, so every term counts
    for (auto& p : net->parameters()) p.add_(torch::randn_like(p) * 0.1);
  }
  const auto images = torch::randn({3, 2, 16, 16});
  const auto got = net->features(images);
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_LT(max_abs(got - reference_features(net, images)), 1e-5);
  EXPECT_EQ(net->forward(images).sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_THROW(net->features(torch::randn({1, 2, 20, 20})), std::invalid_argument);
}

// vits.py build_2d_sincos_position_embedding: zeros at the cls position; patch m = (m / grid, m %
// grid) gets sin and cos of its first coordinate, then of its second, at frequencies 10000^(-i/(dim/4));
// a parameter that never trains.
TEST(VitTest, PositionEmbeddingIsTheFixedSinCos) {
  VisionTransformer net(small_vit());
  const auto pos = param(net, "pos_embed");
  EXPECT_FALSE(pos.requires_grad());
  EXPECT_EQ(max_abs(pos[0][0]), 0.0);
  const int64_t grid = 4, quarter = 16;
  for (const int64_t m : {1, 6, 14}) {
    const double first = double(m / grid), second = double(m % grid);
    for (const int64_t i : {0, 3, 15}) {
      const double omega = 1.0 / std::pow(10000.0, double(i) / quarter);
      const auto row = pos[0][1 + m];
      EXPECT_NEAR(row[i].item<double>(), std::sin(first * omega), 1e-6) << m << " " << i;
      EXPECT_NEAR(row[quarter + i].item<double>(), std::cos(first * omega), 1e-6);
      EXPECT_NEAR(row[2 * quarter + i].item<double>(), std::sin(second * omega), 1e-6);
      EXPECT_NEAR(row[3 * quarter + i].item<double>(), std::cos(second * omega), 1e-6);
    }
  }
  net->features(torch::randn({2, 2, 16, 16})).sum().backward();
  EXPECT_FALSE(pos.grad().defined());
  EXPECT_TRUE(param(net, "cls_token").grad().defined());
}

// --stop-grad-conv1: the patch projection gets no gradient; without it, it does.
TEST(VitTest, StopGradConv1FreezesThePatchProjection) {
  for (const bool stop : {false, true}) {
    VisionTransformer net(small_vit(stop));
    net->features(torch::randn({2, 2, 16, 16})).sum().backward();
    for (const char* name : {"patch_embed.proj.weight", "patch_embed.proj.bias"}) {
      EXPECT_EQ(param(net, name).requires_grad(), !stop) << name;
      EXPECT_EQ(param(net, name).grad().defined(), !stop) << name;
    }
  }
}

// vits.py's initialisation: Linear xavier-uniform, qkv's bound that of three Linear(dim, dim); biases
// zero; the cls token N(0, 1e-6^2); the patch projection xavier-uniform over [dim, c*p*p]; LayerNorm 1, 0.
TEST(VitTest, InitialisationIsVitsPys) {
  torch::manual_seed(2);
  auto o = vit_options_for("vit_small");
  o.depth = 1;
  VisionTransformer net(o);
  const auto within_bound = [&](const std::string& name, int64_t fan_in, int64_t fan_out) {
    const double bound = std::sqrt(6.0 / double(fan_in + fan_out)), got = max_abs(param(net, name));
    EXPECT_LE(got, bound) << name;
    EXPECT_GE(got, 0.99 * bound) << name;  // uniform over many draws reaches the bound
  };
  within_bound("blocks.0.attn.qkv.weight", 384, 384);
  within_bound("blocks.0.attn.proj.weight", 384, 384);
  within_bound("blocks.0.mlp.fc1.weight", 384, 1536);
  within_bound("head.weight", 384, 1000);
  within_bound("patch_embed.proj.weight", 3 * 16 * 16, 384);
  for (const char* bias :
       {"blocks.0.attn.qkv.bias", "blocks.0.mlp.fc2.bias", "head.bias", "patch_embed.proj.bias", "blocks.0.norm1.bias"})
    EXPECT_EQ(max_abs(param(net, bias)), 0.0) << bias;
  EXPECT_EQ(max_abs(param(net, "norm.weight") - 1), 0.0);
  const auto cls = param(net, "cls_token");
  EXPECT_GT(max_abs(cls), 0.0);
  EXPECT_LT(max_abs(cls), 1e-5);
  EXPECT_NEAR(cls.std().item<double>(), 1e-6, 2e-7);
}

// model.activation_checkpointing: the blocks run again in backward, under the forward's autocast;
// every parameter's gradient and the input's are bit for bit those without it, in fp32 and in bf16
// autocast; without a graph (evaluation) the blocks run plainly.
TEST(VitTest, CheckpointedBlocksGiveTheSameGradientsBitForBit) {
  for (const bool bf16 : {false, true}) {
    auto plain_options = small_vit(), checkpointed_options = small_vit();
    checkpointed_options.activation_checkpointing = true;
    torch::manual_seed(3);
    VisionTransformer plain(plain_options);
    torch::manual_seed(3);
    VisionTransformer checkpointed(checkpointed_options);
    const auto x = torch::randn({3, 2, 16, 16});
    const auto weights = torch::randn({3, 64});
    std::vector<torch::Tensor> inputs;
    for (auto* net : {&plain, &checkpointed}) {
      auto input = x.clone().requires_grad_(true);
      torch::Tensor loss;
      {
        const moco::model::AutocastGuard autocast(torch::kCPU, bf16);
        loss = ((*net)->features(input).to(torch::kFloat) * weights).sum();
      }
      loss.backward();  // outside autocast, as a training step's: the recomputation sets it again
      inputs.push_back(input);
    }
    EXPECT_TRUE(torch::equal(inputs[0].grad(), inputs[1].grad())) << (bf16 ? "bf16" : "fp32");
    const auto want = plain->named_parameters(), got = checkpointed->named_parameters();
    for (const auto& item : want) {
      if (!item.value().grad().defined()) {  // the head: features() does not use it
        EXPECT_FALSE(got[item.key()].grad().defined()) << item.key();
        continue;
      }
      ASSERT_TRUE(got[item.key()].grad().defined()) << item.key();
      EXPECT_TRUE(torch::equal(got[item.key()].grad(), item.value().grad()))
          << item.key() << (bf16 ? " in bf16" : " in fp32");
    }
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(checkpointed->features(x), plain->features(x)));
  }
}
