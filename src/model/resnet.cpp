#include "model/resnet.h"

#include "model/checkpointed.h"

#include <torch/torch.h>

#include <stdexcept>

namespace moco::model {
namespace nn = torch::nn;

namespace {

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Named members rather than a Sequential so the names are conv1/bn1/... as in torchvision.
class ResidualBlockImpl : public nn::Module {
 public:
  ResidualBlockImpl(BlockType type, int64_t in, int64_t planes, int64_t stride, int64_t bn_splits) : type_(type) {
    auto bn = [bn_splits](int64_t channels) { return SplitBatchNorm2d(channels, bn_splits); };
    const int64_t out = planes * expansion(type);
    if (type == BlockType::kBasic) {
      conv1_ = register_module("conv1", conv(in, planes, 3, stride));
      bn1_ = register_module("bn1", bn(planes));
      conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
      bn2_ = register_module("bn2", bn(planes));
    } else {
      conv1_ = register_module("conv1", conv(in, planes, 1, 1));
      bn1_ = register_module("bn1", bn(planes));
      conv2_ = register_module("conv2", conv(planes, planes, 3, stride));  // stride on 3x3, as torchvision v1.5
      bn2_ = register_module("bn2", bn(planes));
      conv3_ = register_module("conv3", conv(planes, out, 1, 1));
      bn3_ = register_module("bn3", bn(out));
    }
    if (stride != 1 || in != out) {
      downsample_ = register_module("downsample", nn::Sequential(conv(in, out, 1, stride), bn(out)));
    }
  }

  static int64_t expansion(BlockType type) { return type == BlockType::kBasic ? 1 : 4; }

  // zero_init_residual: the residual branch's last BatchNorm scales by 0 (draws nothing).
  void zero_last_bn_weight() {
    torch::NoGradGuard no_grad;
    (type_ == BlockType::kBasic ? bn2_ : bn3_)->weight.zero_();
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1_(conv1_(x)));
    if (type_ == BlockType::kBasic) {
      y = bn2_(conv2_(y));
    } else {
      y = torch::relu(bn2_(conv2_(y)));
      y = bn3_(conv3_(y));
    }
    auto identity = downsample_ ? downsample_->forward(x) : x;
    return torch::relu(y + identity);
  }

 private:
  BlockType type_;
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  SplitBatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(ResidualBlock);

int64_t scaled(int64_t channels, double width) {
  return std::max<int64_t>(1, static_cast<int64_t>(channels * width + 0.5));
}

// Walks a ResNet's layers as its constructor builds them, adding up parameters and saved outputs.
struct SizeWalk {
  BackboneSize size;
  int64_t channels, side;

  // A convolution without bias and its BatchNorm (weight, bias): the convolution's output is what the
  // BatchNorm saves. Padding kernel/2 makes every output side (side - 1) / stride + 1.
  void conv_bn(int64_t out, int64_t kernel, int64_t stride) {
    size.parameters += static_cast<double>(channels * out * kernel * kernel + 2 * out);
    side = (side - 1) / stride + 1;
    channels = out;
    keep_output();
  }
  void keep_output() {
    size.saved_floats_per_image +=
        static_cast<double>(channels) * static_cast<double>(side) * static_cast<double>(side);
  }

  void block(BlockType type, int64_t planes, int64_t stride) {
    const int64_t in = channels, out = planes * ResidualBlockImpl::expansion(type);
    if (type == BlockType::kBasic) {
      conv_bn(planes, 3, stride);
      keep_output();  // the ReLU after conv1
      conv_bn(planes, 3, 1);
    } else {
      conv_bn(planes, 1, 1);
      keep_output();
      conv_bn(planes, 3, stride);
      keep_output();
      conv_bn(out, 1, 1);
    }
    if (stride != 1 || in != out) {
      size.parameters += static_cast<double>(in * out + 2 * out);
      keep_output();  // the downsample's convolution
    }
    keep_output();  // the ReLU after the sum
  }
};

}  // namespace

BackboneSize estimate_size(const ResNetOptions& o, int64_t side) {
  SizeWalk walk{{}, o.in_channels, side};
  walk.keep_output();  // the image, which conv1 saves
  const int64_t stem = scaled(64, o.width);
  if (o.small_stem) {
    walk.conv_bn(stem, 3, o.small_stem_stride);
  } else {
    walk.conv_bn(stem, 7, 2);
  }
  walk.keep_output();  // ReLU
  if (!o.small_stem) {
    walk.side = (walk.side - 1) / 2 + 1;  // the max-pool's output, which layer1 saves, and its int64 indices
    walk.keep_output();
    walk.keep_output();
    walk.keep_output();
  }
  // With activation_checkpointing a stage keeps only its input: the stem's output, already counted,
  // then each stage's output but the last's (the pooling saves none).
  for (int stage = 0; stage < 4; ++stage) {
    const double before = walk.size.saved_floats_per_image;
    for (int64_t i = 0; i < o.blocks[stage]; ++i)
      walk.block(o.block, scaled(64 << stage, o.width), i == 0 && stage > 0 ? 2 : 1);
    if (!o.activation_checkpointing) continue;
    walk.size.saved_floats_per_image = before;
    if (stage < 3) walk.keep_output();
  }
  const auto features = static_cast<double>(walk.channels), out = static_cast<double>(o.out_dim);
  walk.size.parameters += o.mlp_head ? features * features + features + features * out + out : features * out + out;
  return walk.size;
}

ResNetOptions resnet_options_for(const std::string& arch) {
  ResNetOptions o;
  if (arch == "resnet_tiny") {
    o.blocks = {1, 1, 1, 1};
    o.width = 0.5;
  } else if (arch == "resnet18") {
    o.blocks = {2, 2, 2, 2};
  } else if (arch == "resnet34") {
    o.blocks = {3, 4, 6, 3};
  } else if (arch == "resnet50") {
    o.block = BlockType::kBottleneck;
    o.blocks = {3, 4, 6, 3};
  } else {
    throw std::invalid_argument("unknown architecture '" + arch +
                                "' (known: resnet_tiny, resnet18, resnet34, resnet50)");
  }
  return o;
}

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  if (options.width <= 0) throw std::invalid_argument("ResNet width must be positive");
  if (options.small_stem_stride < 1) throw std::invalid_argument("ResNet small_stem_stride must be positive");
  const int64_t stem = scaled(64, options.width);
  conv1 = register_module("conv1", options.small_stem ? conv(options.in_channels, stem, 3, options.small_stem_stride)
                                                      : conv(options.in_channels, stem, 7, 2));
  bn1 = register_module("bn1", SplitBatchNorm2d(stem, options.bn_splits));

  int64_t in = stem;
  auto make_stage = [&](int stage, int64_t stride) {
    nn::Sequential seq;
    const int64_t planes = scaled(64 << stage, options.width);
    for (int64_t i = 0; i < options.blocks[stage]; ++i) {
      seq->push_back(ResidualBlock(options.block, in, planes, i == 0 ? stride : 1, options.bn_splits));
      in = planes * ResidualBlockImpl::expansion(options.block);
    }
    return seq;
  };
  layer1 = register_module("layer1", make_stage(0, 1));
  layer2 = register_module("layer2", make_stage(1, 2));
  layer3 = register_module("layer3", make_stage(2, 2));
  layer4 = register_module("layer4", make_stage(3, 2));
  feature_dim_ = in;

  if (options.mlp_head) {
    fc_mlp = register_module("fc", nn::Sequential(nn::Linear(in, in), nn::ReLU(), nn::Linear(in, options.out_dim)));
  } else {
    fc_linear = register_module("fc", nn::Linear(in, options.out_dim));
  }

  // torchvision's initialisation: He (fan_out) for convolutions; BN starts at scale 1, shift 0.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
  if (options.zero_init_residual) {
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* block = m->as<ResidualBlockImpl>()) block->zero_last_bn_weight();
    }
  }
}

torch::Tensor ResNetImpl::features(const torch::Tensor& x) {
  auto y = torch::relu(bn1(conv1(x)));
  if (!options_.small_stem) y = torch::max_pool2d(y, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  for (auto* stage : {&layer1, &layer2, &layer3, &layer4})
    y = checkpointed(**stage, y, options_.activation_checkpointing);
  return torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) { return head(features(x)); }

torch::Tensor ResNetImpl::head(const torch::Tensor& f) { return fc_mlp ? fc_mlp->forward(f) : fc_linear->forward(f); }

int64_t count_parameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace moco::model
