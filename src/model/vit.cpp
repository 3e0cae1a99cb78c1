#include "model/vit.h"

#include "model/checkpointed.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

namespace moco::model {
namespace nn = torch::nn;

namespace {

constexpr double kLayerNormEps = 1e-6;  // vits.py norm_layer=partial(nn.LayerNorm, eps=1e-6)

nn::LayerNorm layer_norm(int64_t dim) { return nn::LayerNorm(nn::LayerNormOptions({dim}).eps(kLayerNormEps)); }

// timm's Attention: one qkv Linear (with bias), heads of dim/heads, softmax(q k^T / sqrt(d)) v, proj.
class AttentionImpl : public nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads)
      : heads_(heads),
        scale_(1.0 / std::sqrt(static_cast<double>(dim / heads))),
        qkv(register_module("qkv", nn::Linear(dim, dim * 3))),
        proj(register_module("proj", nn::Linear(dim, dim))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), n = x.size(1), c = x.size(2);
    const auto qkv_heads = qkv(x).reshape({b, n, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4});
    const auto q = qkv_heads[0], k = qkv_heads[1], v = qkv_heads[2];
    const auto attention = (q.matmul(k.transpose(-2, -1)) * scale_).softmax(-1);
    return proj(attention.matmul(v).transpose(1, 2).reshape({b, n, c}));
  }

 private:
  int64_t heads_;
  double scale_;

 public:
  nn::Linear qkv, proj;
};
TORCH_MODULE(Attention);

class MlpImpl : public nn::Module {
 public:
  MlpImpl(int64_t dim, int64_t hidden)
      : fc1(register_module("fc1", nn::Linear(dim, hidden))), fc2(register_module("fc2", nn::Linear(hidden, dim))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }
  nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

// timm's pre-norm Block: x + attn(norm1(x)), then + mlp(norm2(x)).
class TransformerBlockImpl : public nn::Module {
 public:
  TransformerBlockImpl(int64_t dim, int64_t heads, int64_t mlp_ratio)
      : norm1(register_module("norm1", layer_norm(dim))),
        attn(register_module("attn", Attention(dim, heads))),
        norm2(register_module("norm2", layer_norm(dim))),
        mlp(register_module("mlp", Mlp(dim, dim * mlp_ratio))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(norm1(x));
    return x + mlp(norm2(x));
  }
  nn::LayerNorm norm1;
  Attention attn;
  nn::LayerNorm norm2;
  Mlp mlp;
};
TORCH_MODULE(TransformerBlock);

// Uniform in [-bound, bound] with xavier's bound for the given fans.
void xavier_uniform(torch::Tensor& w, int64_t fan_in, int64_t fan_out) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  nn::init::uniform_(w, -bound, bound);
}

}  // namespace

ViTOptions vit_options_for(const std::string& arch) {
  ViTOptions o;
  if (arch == "vit_small") {  // vits.py vit_small: embed_dim=384, depth=12, num_heads=12
    o.embed_dim = 384;
    o.num_heads = 12;               // vits.py's ViT-S: 12 heads of 32, not DeiT-S's 6 of 64
  } else if (arch == "vit_base") {  // vits.py vit_base: embed_dim=768, depth=12, num_heads=12
    o.embed_dim = 768;
    o.num_heads = 12;
  } else if (arch == "vit_tiny_cpu") {
    o.patch_size = 4;
    o.embed_dim = 64;
    o.depth = 4;
    o.num_heads = 4;
  } else {
    throw std::invalid_argument("unknown ViT architecture '" + arch + "' (known: vit_small, vit_base, vit_tiny_cpu)");
  }
  return o;
}

bool is_vit_arch(const std::string& arch) { return arch.rfind("vit_", 0) == 0; }

torch::Tensor sincos_position_embedding(int64_t grid, int64_t dim) {
  if (dim % 4 != 0) throw std::invalid_argument(fmt::format("ViT embed_dim {} must be divisible by 4", dim));
  const int64_t quarter = dim / 4;
  const auto coords =
      torch::meshgrid({torch::arange(grid, torch::kFloat32), torch::arange(grid, torch::kFloat32)}, "ij");
  const auto omega = 1.0 / torch::pow(10000.0, torch::arange(quarter, torch::kFloat32) / quarter);
  const auto first = coords[0].flatten().unsqueeze(1) * omega.unsqueeze(0);  // [grid^2, dim/4]
  const auto second = coords[1].flatten().unsqueeze(1) * omega.unsqueeze(0);
  const auto patches = torch::cat({first.sin(), first.cos(), second.sin(), second.cos()}, 1);
  return torch::cat({torch::zeros({1, dim}), patches}, 0).unsqueeze(0);
}

VisionTransformerImpl::VisionTransformerImpl(const ViTOptions& options) : options_(options) {
  const auto& o = options;
  if (o.patch_size < 1 || o.image_size % o.patch_size != 0)
    throw std::invalid_argument(
        fmt::format("ViT: image size {} is not a multiple of the patch size {}", o.image_size, o.patch_size));
  if (o.num_heads < 1 || o.embed_dim % o.num_heads != 0)
    throw std::invalid_argument(
        fmt::format("ViT: embed_dim {} is not a multiple of {} heads", o.embed_dim, o.num_heads));
  cls_token = register_parameter("cls_token", torch::zeros({1, 1, o.embed_dim}));
  pos_embed = register_parameter("pos_embed", sincos_position_embedding(grid_size(), o.embed_dim),
                                 /*requires_grad=*/false);
  auto patch_embed = register_module("patch_embed", std::make_shared<nn::Module>());
  patch_proj = patch_embed->register_module(
      "proj", nn::Conv2d(nn::Conv2dOptions(o.in_channels, o.embed_dim, o.patch_size).stride(o.patch_size)));
  blocks = register_module("blocks", nn::ModuleList());
  for (int64_t i = 0; i < o.depth; ++i) blocks->push_back(TransformerBlock(o.embed_dim, o.num_heads, o.mlp_ratio));
  norm = register_module("norm", layer_norm(o.embed_dim));
  head = register_module("head", nn::Linear(o.embed_dim, o.out_dim));
  initialise();
}

// vits.py VisionTransformerMoCo.__init__: every Linear xavier-uniform (qkv's bound as if q, k and v
// were three Linear layers), biases zero; the cls token N(0, 1e-6^2); the patch projection
// xavier-uniform over its flattened [dim, channels*patch*patch] view (vits.py writes 3 channels),
// frozen with stop_grad_conv1. LayerNorms keep weight 1, bias 0.
void VisionTransformerImpl::initialise() {
  torch::NoGradGuard no_grad;
  for (auto& item : named_modules("", /*include_self=*/false)) {
    auto* linear = item.value()->as<nn::Linear>();
    if (!linear) continue;
    const bool qkv = item.key().find("qkv") != std::string::npos;
    const int64_t out = linear->weight.size(0), in = linear->weight.size(1);
    xavier_uniform(linear->weight, in, qkv ? out / 3 : out);
    nn::init::zeros_(linear->bias);
  }
  nn::init::normal_(cls_token, 0.0, 1e-6);
  const auto& o = options_;
  xavier_uniform(patch_proj->weight, o.in_channels * o.patch_size * o.patch_size, o.embed_dim);
  nn::init::zeros_(patch_proj->bias);
  if (o.stop_grad_conv1) {
    patch_proj->weight.requires_grad_(false);
    patch_proj->bias.requires_grad_(false);
  }
}

torch::Tensor VisionTransformerImpl::embed_patches(const torch::Tensor& x) {
  if (x.dim() != 4 || x.size(2) != options_.image_size || x.size(3) != options_.image_size)
    throw std::invalid_argument(fmt::format("ViT built for {}x{} images was given a {}-D batch of {}x{}",
                                            options_.image_size, options_.image_size, x.dim(), x.size(-2), x.size(-1)));
  return patch_proj(x).flatten(2).transpose(1, 2);
}

torch::Tensor VisionTransformerImpl::features(const torch::Tensor& x) {
  auto tokens = embed_patches(x);
  tokens = torch::cat({cls_token.expand({tokens.size(0), -1, -1}), tokens}, 1) + pos_embed;
  for (const auto& block : *blocks)
    tokens = checkpointed(*block->as<TransformerBlockImpl>(), tokens, options_.activation_checkpointing);
  return norm(tokens).select(1, 0);
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& x) { return head(features(x)); }

BackboneSize estimate_size(const ViTOptions& o) {
  const auto d = static_cast<double>(o.embed_dim), hidden = d * static_cast<double>(o.mlp_ratio);
  const double grid = static_cast<double>(o.image_size / o.patch_size), tokens = grid * grid + 1;
  const double patch_inputs = static_cast<double>(o.in_channels * o.patch_size * o.patch_size);
  const double block_parameters =
      2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d);
  BackboneSize size;
  size.parameters = (patch_inputs * d + d) + d + tokens * d + static_cast<double>(o.depth) * block_parameters + 2 * d +
                    (d * static_cast<double>(o.out_dim) + static_cast<double>(o.out_dim));
  const double block_saved = (8 * d + 2 * hidden) * tokens + static_cast<double>(o.num_heads) * tokens * tokens;
  const double blocks_saved = o.activation_checkpointing ? static_cast<double>(o.depth) * d * tokens
                                                         : static_cast<double>(o.depth) * block_saved;
  const auto side = static_cast<double>(o.image_size);
  size.saved_floats_per_image =
      static_cast<double>(o.in_channels) * side * side + blocks_saved + 2 * d * tokens;  // the final norm's in and out
  return size;
}

}  // namespace moco::model
