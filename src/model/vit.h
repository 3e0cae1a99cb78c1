// defines: ViTOptions, vit_options_for(arch), is_vit_arch, VisionTransformer (the official MoCo v3
// vits.py VisionTransformerMoCo, on timm's VisionTransformer, with timm's parameter names), estimate_size
#pragma once

#include "model/backbone.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <string>

namespace moco::model {

struct ViTOptions {
  int64_t image_size = 224;  // square; the fixed position embedding is built for its grid of patches
  int64_t patch_size = 16;
  int64_t in_channels = 3;
  int64_t embed_dim = 384;
  int64_t depth = 12;
  int64_t num_heads = 12;
  int64_t mlp_ratio = 4;
  int64_t out_dim = 1000;  // the head's (timm's num_classes); MoCo v3 replaces the head
  // vits.py --stop-grad-conv1: the patch projection is frozen at its random initialisation.
  bool stop_grad_conv1 = false;
  // model.activation_checkpointing: each block keeps only its input for backward and runs again there
  // (the same ops on the same values: the gradients bit for bit those without it).
  bool activation_checkpointing = false;
};

// vit_small (patch 16, dim 384, depth 12, 12 heads: vits.py, not DeiT's 6), vit_base (768, 12, 12),
// vit_tiny_cpu (patch 4, dim 64, depth 4, 4 heads: a project size for 28-32 px images on a CPU).
// Throws std::invalid_argument listing the known names.
ViTOptions vit_options_for(const std::string& arch);
bool is_vit_arch(const std::string& arch);

// The parameters and saved activations of VisionTransformer(options), from the blocks' shapes: each
// block keeps 8 + 2 x mlp_ratio token-wide tensors (its input, the norms' outputs, qkv, the attention's
// output, the residual, the MLP's hidden layer before and after GELU) and each head's softmax; with
// activation_checkpointing, its input only (one block's whole set lives again during backward); the
// final norm keeps its input and output.
BackboneSize estimate_size(const ViTOptions& options);

// Pre-norm transformer blocks on patch tokens and a prepended cls token; features are the final
// LayerNorm's cls token. Names equal timm's state_dict keys: cls_token, pos_embed,
// patch_embed.proj.*, blocks.N.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}.*, norm.*, head.*.
// pos_embed is a parameter that never requires grad (as vits.py), so it is checkpointed and exported.
class VisionTransformerImpl : public BackboneImpl {
 public:
  explicit VisionTransformerImpl(const ViTOptions& options);

  torch::Tensor forward(const torch::Tensor& x);            // head(features(x))
  torch::Tensor features(const torch::Tensor& x) override;  // the normed cls token [n, embed_dim]
  int64_t feature_dim() const override { return options_.embed_dim; }
  std::string head_name() const override { return "head"; }
  const ViTOptions& options() const { return options_; }
  int64_t grid_size() const { return options_.image_size / options_.patch_size; }

 private:
  void initialise();
  torch::Tensor embed_patches(const torch::Tensor& x);  // [n, grid^2, dim]

  ViTOptions options_;
  torch::Tensor cls_token, pos_embed;
  torch::nn::Conv2d patch_proj{nullptr};  // patch_embed.proj
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(VisionTransformer);

// vits.py build_2d_sincos_position_embedding: [1, 1 + grid^2, dim], zeros at the cls position, then
// for patch m = (m / grid, m % grid): sin and cos of the first coordinate, then of the second, each
// at dim/4 frequencies 1 / 10000^(i / (dim/4)).
torch::Tensor sincos_position_embedding(int64_t grid, int64_t dim);

}  // namespace moco::model
