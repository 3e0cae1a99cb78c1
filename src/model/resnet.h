// defines: ResNetOptions, ResNet (torchvision-compatible names), resnet_options_for(arch), estimate_size
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "model/backbone.h"
#include "model/split_batchnorm.h"

#include <array>
#include <string>

namespace moco::model {

enum class BlockType { kBasic, kBottleneck };

struct ResNetOptions {
  BlockType block = BlockType::kBasic;
  std::array<int64_t, 4> blocks{2, 2, 2, 2};  // blocks per stage (resnet18)
  int64_t in_channels = 3;
  bool small_stem = false;        // 3x3 stride-1 conv and no max-pool, for 28-32 px images
  int64_t small_stem_stride = 1;  // 2 halves every feature map of a small stem: ~4x fewer FLOPs
  double width = 1.0;             // multiplies every stage's width (64, 128, 256, 512)
  int64_t out_dim = 128;          // fc output
  bool mlp_head = false;          // MoCo v2: fc = Linear(h,h) -> ReLU -> Linear(h,out_dim)
  int64_t bn_splits = 1;          // >1: every BatchNorm normalises this many batch groups apart
  // torchvision's zero_init_residual: each residual branch's last BatchNorm (bn2 of a basic block, bn3
  // of a bottleneck) starts with weight 0, so every block starts as the identity (MoCo v3's main_moco.py)
  bool zero_init_residual = false;
  // model.activation_checkpointing: each stage (layer1-4) keeps only its input for backward and runs
  // again there, its BatchNorm's running statistics moved once
  bool activation_checkpointing = false;
};

// resnet_tiny (BasicBlock [1,1,1,1], width 0.5, ~1.2M parameters, 1.3M with the MLP head), resnet18, resnet34,
// resnet50. Throws std::invalid_argument listing the known names.
ResNetOptions resnet_options_for(const std::string& arch);

// Parameter and buffer names equal torchvision's state_dict keys (conv1.weight,
// layer1.0.bn1.running_mean, layer2.0.downsample.0.weight, fc.weight / fc.0.weight, ...).
class ResNetImpl : public BackboneImpl {
 public:
  explicit ResNetImpl(const ResNetOptions& options);

  torch::Tensor forward(const torch::Tensor& x);            // head(features(x))
  torch::Tensor features(const torch::Tensor& x) override;  // pooled backbone output [n, feature_dim]
  torch::Tensor head(const torch::Tensor& f);               // fc: the linear or MLP head on pooled features
  int64_t feature_dim() const override { return feature_dim_; }
  std::string head_name() const override { return "fc"; }
  const ResNetOptions& options() const { return options_; }

 private:
  ResNetOptions options_;
  int64_t feature_dim_ = 0;
  torch::nn::Conv2d conv1{nullptr};
  SplitBatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc_linear{nullptr};   // fc when mlp_head is off
  torch::nn::Sequential fc_mlp{nullptr};  // fc when mlp_head is on
};
TORCH_MODULE(ResNet);

int64_t count_parameters(torch::nn::Module& module);

// The parameters and saved activations of ResNet(options) on side x side images, walking the stages
// the constructor builds (each convolution's output, saved by its BatchNorm, and each ReLU's); with
// activation_checkpointing, the stem's and each stage's input (one stage's whole set lives again
// during backward).
BackboneSize estimate_size(const ResNetOptions& options, int64_t side);

}  // namespace moco::model
