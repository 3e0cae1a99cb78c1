// defines: Backbone, the frozen feature extractor that the linear protocol and the kNN evaluation
// read: model.pretrained's checkpoint or export, MoCo's random initialisation, or the raw pixels
#pragma once

#include "model/backbone.h"
#include "run/config.h"

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

namespace moco::lincls {

class Backbone {
 public:
  enum class Kind { kPretrained, kRandomInit, kRawPixels };

  // From model.pretrained:
  //   a checkpoint folder, a checkpoints/ folder or a run's output_dir (the checkpoint `latest`
  //   names): the tensors of the encoder its method evaluates (run::MethodRoom::encoder_group);
  //   a `moco_ckpt export` file: its root datasets (<key>);
  //   "random": the encoder MoCo training starts from (model.*, train.seed), bit for bit;
  //   "raw_pixels": no network, the normalised image flattened.
  // The network is the one model.arch names (run::make_backbone): a ResNet under torchvision's keys
  // or a ViT under timm's. Its head (fc.* or head.*, where v3 keeps its projector) is never read, as
  // main_lincls.py drops `<linear_keyword>.*`. A source that does not fit model.* (a missing, extra
  // or differently shaped tensor) or a path that is none of the above is a run::ConfigError naming
  // the tensor or the path; a corrupt file a ckpt::CheckpointError naming the file and the tensor. The network
  // is in eval mode (BatchNorm running statistics) and nothing of it requires grad.
  static Backbone load(const run::Config& config, torch::Device device);

  Kind kind() const { return kind_; }
  // metrics.jsonl's word for it: "trained", "random_init" or "raw_pixels".
  const char* label() const;
  // What was loaded, for logs: "<folder> (step N)", "<file>", "random init (train.seed S)", "raw pixels".
  const std::string& description() const { return description_; }
  // The checkpoint folder or file read (kPretrained), else empty.
  const std::string& source() const { return source_; }
  // A hash of the backbone tensors read from source() (names, dtypes, shapes, CRC-32s), 16 hex
  // digits (kPretrained), else empty: what a resumed linear probe checks it reads again.
  const std::string& content_hash() const { return content_hash_; }
  int64_t feature_dim() const { return feature_dim_; }
  // Features [n, feature_dim] of normalised images [n, C, S, S] (any device), on the backbone's
  // device, without a graph.
  torch::Tensor features(const torch::Tensor& normalised_images) const;
  // The network (null for raw pixels); a handle sharing the module.
  model::Backbone net() const { return net_; }

  // The official sanity check: every backbone tensor (parameters and buffers, the head excluded)
  // is bitwise the one of the source, read again from disk (or drawn again from the seed). Returns
  // how many were compared; throws std::runtime_error naming the first that differs.
  int64_t check_unchanged(const run::Config& config) const;

 private:
  Kind kind_ = Kind::kRawPixels;
  std::string description_;
  std::string source_;  // the checkpoint folder or file read (not `latest`, which may move on)
  std::string content_hash_;
  int64_t feature_dim_ = 0;
  model::Backbone net_{nullptr};
};

// The network's tensors that a backbone holds, by state_dict key (torchvision's or timm's): parameters and buffers
// whose key is not under the head's name (net.head_name(): "fc" for a ResNet, "head" for a ViT).
std::vector<std::pair<std::string, torch::Tensor>> backbone_tensors(model::BackboneImpl& net);

}  // namespace moco::lincls
