#include "lincls/frozen_backbone.h"

#include "ckpt/checkpoint_dir.h"
#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "data/augment.h"
#include "run/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>

namespace moco::lincls {
namespace fs = std::filesystem;
using run::ConfigError;

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The backbone tensors of model.pretrained, by state_dict key, on the CPU.
struct Source {
  std::string path;  // the checkpoint folder or the file read
  std::string description;
  std::string trained_with;  // the checkpoint's own model.* keys, to explain a mismatch
  std::string arch;          // the checkpoint's model.arch; "": unknown (an export, an unreadable config)
  int stem_stride = 0;       // the checkpoint's model.stem_stride; 0: unknown (an export, an unreadable config)
  std::map<std::string, torch::Tensor> tensors;
};

// FNV-1a, 64 bits: stable across builds (std::hash is not), enough to tell two backbones apart.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The tensors' names, dtypes, shapes and CRC-32s, hashed: the same source read twice hashes the same,
// another checkpoint (or an export written over the file) does not.
std::string hash_of_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  std::string summary;
  for (const auto& [key, t] : tensors)
    summary += fmt::format("{} {} [{}] {:08x}\n", key, ckpt::dtype_name(t.scalar_type()), fmt::join(t.sizes(), ","),
                           ckpt::tensor_crc32(t));
  return fmt::format("{:016x}", fnv1a(summary));
}

// The keys that decide a backbone, as a mismatch names them: a ViT's position embedding is built for
// data.image_size; a ResNet's shapes follow its stem and width.
std::string model_keys(const run::Config& c) {
  if (run::is_vit(c.model.arch))
    return fmt::format("model.arch={} data.image_size={}", c.model.arch, c.data.augment.out_size);
  return fmt::format("model.arch={} model.small_stem={} model.stem_stride={} model.width={}", c.model.arch,
                     c.model.small_stem, c.model.stem_stride, c.model.width);
}

// The head's keys (main_lincls.py's linear_keyword): never read from a source, never compared.
std::string head_prefix(const model::BackboneImpl& net) { return net.head_name() + "."; }

// What the checkpoint's own config says of the architecture, to check and to explain a mismatch.
void note_training_config(Source& source, const std::string& config_yaml, const std::string& where,
                          const run::Config& c) {
  if (config_yaml.empty()) return;  // an export written before exports carried their config
  try {
    const auto saved = run::load_config_text(c.methods, config_yaml, where);
    source.trained_with = "; the checkpoint was trained with " + model_keys(saved);
    source.arch = run::to_string(saved.model.arch);
    source.stem_stride = saved.model.stem_stride;
  } catch (const std::exception&) {
    // Only a hint: a config this version cannot read still leaves the tensors to compare.
  }
}

// A file given as model.pretrained must be a `moco_ckpt export`: anything else (a YAML file, say)
// is the config's fault, named by its key.
ckpt::H5TensorReader open_export(const std::string& path) {
  try {
    return ckpt::H5TensorReader(path);
  } catch (const std::exception& e) {
    throw ConfigError(
        fmt::format("model.pretrained: {} is a file but not a `moco_ckpt export` in HDF5 (--format h5, the default; "
                    "the torch and detectron2 formats are for PyTorch): {}",
                    path, e.what()));
  }
}

// The checkpoint group of the encoder evaluation reads: the one the method that wrote the checkpoint
// names (its saved config's model.method), else that of the config's own method.
std::string encoder_group(const std::string& config_yaml, const std::string& where, const run::Config& c) {
  try {
    return run::method_room(run::load_config_text(c.methods, config_yaml, where)).encoder_group;
  } catch (const std::exception&) {
    return run::method_room(c).encoder_group;
  }
}

// Every tensor of the source but those under head_prefix (the head, or a projector in its place).
Source read_source(const std::string& path, const std::string& head_prefix, const run::Config& c) {
  Source source;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    const auto reader = open_export(path);
    for (const auto& key : reader.list())
      if (!starts_with(key, head_prefix)) source.tensors.emplace(key, reader.read(key));
    source.path = source.description = path;
    note_training_config(source, reader.string_attribute("config_yaml"), path, c);
    if (source.tensors.empty()) throw ConfigError(fmt::format("model.pretrained: {} holds no backbone tensor", path));
    return source;
  }
  if (!fs::is_directory(path, ec))
    throw ConfigError(fmt::format(
        "model.pretrained: '{}' is neither a checkpoint folder, a run's output folder, a `moco_ckpt export` "
        "file, 'random' nor 'raw_pixels'",
        path));
  // A folder without any checkpoint is the command line's mistake (exit 2), a damaged one is not.
  const auto dir = ckpt::find_checkpoint_dir(path);
  if (!dir) throw ConfigError("model.pretrained: " + ckpt::no_checkpoint_message(path));
  ckpt::CheckpointReader reader(*dir);
  const auto& manifest = reader.manifest();
  const std::string group = encoder_group(manifest.config_yaml, reader.dir(), c);
  for (const auto& record : manifest.tensors) {
    if (!starts_with(record.name, group)) continue;
    const std::string key = record.name.substr(group.size());
    // Rank-local tensors (BatchNorm statistics each rank kept): rank 0's, which the trainer evaluates.
    if (starts_with(key, head_prefix) || (record.rank_local && record.shard != 0)) continue;
    source.tensors.emplace(key, reader.read(record));
  }
  source.path = reader.dir();
  source.description = fmt::format("{} (step {})", reader.dir(), manifest.step);
  note_training_config(source, manifest.config_yaml, reader.dir(), c);
  if (source.tensors.empty())
    throw ConfigError(fmt::format("model.pretrained: {} holds no tensor {}*", source.description, group));
  return source;
}

std::string shape_text(const torch::Tensor& t) {
  return t.dim() == 0 ? "scalar" : fmt::format("{}", fmt::join(t.sizes(), "x"));
}

// Throws ConfigError naming the first tensor in which the source and the network differ in name,
// shape or dtype.
void check_fits(const Source& source, model::BackboneImpl& net, const run::Config& c) {
  const auto mine = backbone_tensors(net);
  auto mismatch = [&](const std::string& what) {
    return ConfigError(fmt::format("model.pretrained: {} does not fit {} with {}-channel images: {}{}",
                                   source.description, model_keys(c), run::dataset_channels(c), what,
                                   source.trained_with));
  };
  // The architecture first: a ViT read as a ResNet differs in everything, and its model.arch says so
  // where the first tensor or the stem's stride would not.
  if (!source.arch.empty() && source.arch != run::to_string(c.model.arch))
    throw mismatch(fmt::format("it was trained with model.arch={}", source.arch));
  // The stem's stride changes no tensor's shape, only what the features mean: without this check a
  // stride-2 encoder evaluated at stride 1 would score, silently, as some other network.
  if (source.stem_stride != 0 && source.stem_stride != c.model.stem_stride)
    throw mismatch(fmt::format("it was trained with model.stem_stride={}", source.stem_stride));
  std::map<std::string, bool> expected;
  for (const auto& [key, tensor] : mine) {
    expected[key] = true;
    const auto it = source.tensors.find(key);
    if (it == source.tensors.end()) throw mismatch(fmt::format("it has no tensor '{}'", key));
    if (it->second.sizes() != tensor.sizes())
      throw mismatch(fmt::format("tensor '{}' is {} there, {} here", key, shape_text(it->second), shape_text(tensor)));
    if (it->second.scalar_type() != tensor.scalar_type())
      throw mismatch(fmt::format("tensor '{}' is {} there, {} here", key, ckpt::dtype_name(it->second.scalar_type()),
                                 ckpt::dtype_name(tensor.scalar_type())));
  }
  for (const auto& [key, tensor] : source.tensors)
    if (!expected.count(key)) throw mismatch(fmt::format("it holds tensor '{}', which this network lacks", key));
}

// The query encoder as training initialises it: the method's (run::MethodRoom::initial_encoder).
model::Backbone random_init(const run::Config& c) {
  return run::method_room(c).initial_encoder(c, run::dataset_channels(c));
}

void freeze(model::Backbone& net, torch::Device device) {
  net->to(device);
  net->eval();
  for (auto& p : net->parameters()) p.set_requires_grad(false);
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> backbone_tensors(model::BackboneImpl& net) {
  const std::string head = head_prefix(net);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : net.named_parameters())
    if (!starts_with(item.key(), head)) out.emplace_back(item.key(), item.value());
  for (const auto& item : net.named_buffers())
    if (!starts_with(item.key(), head)) out.emplace_back(item.key(), item.value());
  return out;
}

Backbone Backbone::load(const run::Config& c, torch::Device device) {
  Backbone b;
  const std::string& what = c.model.pretrained;
  if (what.empty())
    throw ConfigError(
        "model.pretrained is not set: name a checkpoint (folder or run output_dir), a `moco_ckpt export` file, "
        "random or raw_pixels");
  if (what == "raw_pixels") {
    b.kind_ = Kind::kRawPixels;
    b.description_ = "raw pixels";
    b.feature_dim_ = run::dataset_channels(c) * c.data.augment.out_size * c.data.augment.out_size;
    return b;
  }
  b.net_ = random_init(c);
  if (what == "random") {
    b.kind_ = Kind::kRandomInit;
    b.description_ = fmt::format("random init (train.seed {})", c.train.seed);
  } else {
    b.kind_ = Kind::kPretrained;
    const Source source = read_source(what, head_prefix(*b.net_), c);
    check_fits(source, *b.net_, c);
    torch::NoGradGuard no_grad;
    for (auto& [key, tensor] : backbone_tensors(*b.net_)) tensor.copy_(source.tensors.at(key));
    b.description_ = source.description;
    b.source_ = source.path;
    b.content_hash_ = hash_of_tensors(source.tensors);
  }
  freeze(b.net_, device);
  b.feature_dim_ = b.net_->feature_dim();
  return b;
}

const char* Backbone::label() const {
  switch (kind_) {
    case Kind::kPretrained:
      return "trained";
    case Kind::kRandomInit:
      return "random_init";
    case Kind::kRawPixels:
      break;
  }
  return "raw_pixels";
}

torch::Tensor Backbone::features(const torch::Tensor& normalised_images) const {
  torch::NoGradGuard no_grad;
  if (!net_) return normalised_images.flatten(1);
  model::Backbone net = net_;  // a handle: the module's forward is not const
  const auto device = net->parameters().front().device();
  return net->features(normalised_images.to(device));
}

int64_t Backbone::check_unchanged(const run::Config& c) const {
  if (!net_) return 0;
  std::map<std::string, torch::Tensor> reference;
  if (kind_ == Kind::kPretrained) {
    reference = read_source(source_, head_prefix(*net_), c).tensors;
  } else {
    auto fresh = random_init(c);
    for (const auto& [key, tensor] : backbone_tensors(*fresh)) reference.emplace(key, tensor);
  }
  int64_t compared = 0;
  model::Backbone net = net_;
  for (const auto& [key, tensor] : backbone_tensors(*net)) {
    const auto it = reference.find(key);
    if (it == reference.end() || !torch::equal(tensor.to(torch::kCPU), it->second))
      throw std::runtime_error(fmt::format(
          "sanity check failed: backbone tensor '{}' is no longer bitwise the one of {}", key, description_));
    ++compared;
  }
  return compared;
}

}  // namespace moco::lincls
