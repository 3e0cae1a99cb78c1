// defines: BackboneImpl (what the training loop, kNN, the online probe and initial weights need of an
// encoder: pooled features and their width), its handle Backbone, BackboneSize (a backbone's memory
// counted from its options, before it is built)
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace moco::model {

// What a backbone holds, counted from its options without building it: its parameters (exactly), and
// the floats its forward keeps for backward per image (at least: the outputs autograd saves, not the
// transients freed on the way).
struct BackboneSize {
  double parameters = 0;
  double saved_floats_per_image = 0;
};

// ResNet and VisionTransformer share this, so that what reads features takes either.
class BackboneImpl : public torch::nn::Module {
 public:
  // [n, feature_dim]: what a linear probe or kNN sees (pooled features; the ViT's normed cls token).
  virtual torch::Tensor features(const torch::Tensor& x) = 0;
  virtual int64_t feature_dim() const = 0;
  // The head's submodule name, which MoCo v3's projector replaces: "fc" (torchvision), "head" (timm).
  virtual std::string head_name() const = 0;
};

// A shared handle, as TORCH_MODULE makes one (ResNet and VisionTransformer convert to it).
class Backbone : public torch::nn::ModuleHolder<BackboneImpl> {
 public:
  using torch::nn::ModuleHolder<BackboneImpl>::ModuleHolder;
  // From any backbone's handle (ResNet, VisionTransformer): the same module, shared.
  // A forwarding reference, so that it wins over ModuleHolder's inherited forwarding constructor
  // (which would construct a new BackboneImpl from the handle).
  template <typename Holder, typename Impl = typename std::decay_t<Holder>::ContainedType,
            typename = std::enable_if_t<std::is_base_of_v<BackboneImpl, Impl> &&
                                        !std::is_same_v<std::decay_t<Holder>, Backbone>>>
  Backbone(Holder&& holder)  // NOLINT(google-explicit-constructor)
      : ModuleHolder(std::shared_ptr<BackboneImpl>(holder.ptr())) {}
};

}  // namespace moco::model
