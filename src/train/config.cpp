#include "train/config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace moco::train {
namespace {

template <typename T>
const char* type_name();
template <>
const char* type_name<bool>() {
  return "bool";
}
template <>
const char* type_name<int>() {
  return "int";
}
template <>
const char* type_name<int64_t>() {
  return "int";
}
template <>
const char* type_name<uint64_t>() {
  return "unsigned int";
}
template <>
const char* type_name<double>() {
  return "float";
}
template <>
const char* type_name<std::string>() {
  return "string";
}
template <>
const char* type_name<std::vector<double>>() {
  return "list of float";
}

// Thrown by a float field given .nan or .inf: no key means anything by them, and a config holding
// one cannot be written back (to_yaml prints "nan", which YAML does not read as a float), so a
// checkpoint of the run could not be resumed.
struct NotFinite {};

// One configurable value: its dotted key, how to read it from YAML and how to write it back.
struct Field {
  std::string key, type, help;
  std::function<void(Config&, const YAML::Node&)> set;  // throws YAML::Exception on a bad value
  std::function<YAML::Node(const Config&)> get;
};

// Floats are written in their shortest exact form (0.07, not yaml-cpp's 0.070000000000000007).
template <typename T>
YAML::Node to_node(const T& value) {
  return YAML::Node(value);
}
template <>
YAML::Node to_node(const double& value) {
  return YAML::Node(fmt::format("{}", value));
}
template <>
YAML::Node to_node(const std::vector<double>& values) {
  YAML::Node list(YAML::NodeType::Sequence);
  for (double v : values) list.push_back(to_node(v));
  return list;
}

template <typename T, typename Access>
Field make_field(std::string key, std::string help, Access access) {
  Field f;
  f.key = std::move(key);
  f.type = type_name<T>();
  f.help = std::move(help);
  f.set = [access](Config& c, const YAML::Node& node) {
    T value;
    if constexpr (std::is_same_v<T, std::vector<double>>) {
      value = node.IsScalar() ? T{node.as<double>()} : node.as<T>();  // "mean: 0.5" is a one-element list
      for (double v : value)
        if (!std::isfinite(v)) throw NotFinite{};
    } else {
      if (!node.IsScalar()) throw YAML::Exception(node.Mark(), "not a scalar");
      value = node.as<T>();
      if constexpr (std::is_same_v<T, double>)
        if (!std::isfinite(value)) throw NotFinite{};
    }
    access(c) = std::move(value);
  };
  f.get = [access](const Config& c) { return to_node(access(const_cast<Config&>(c))); };
  return f;
}

#define MOCO_FIELD(path, help)                                     \
  make_field<std::decay_t<decltype(std::declval<Config>().path)>>( \
      #path, help, [](Config & c) -> auto& { return c.path; })

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      MOCO_FIELD(model.arch, "encoder: resnet_tiny (~1.3M parameters with the MLP head), resnet18, resnet34, resnet50"),
      MOCO_FIELD(model.small_stem, "3x3 stride-1 first conv and no max-pool, for 28-32 px images"),
      MOCO_FIELD(
          model.stem_stride,
          "stride of the small stem's conv: 2 halves every feature map (about 4x fewer FLOPs, for speed on CPUs)"),
      MOCO_FIELD(model.width, "width multiplier of every stage; 0 keeps the architecture's own"),
      MOCO_FIELD(model.dim, "dimension of queries and keys"),
      MOCO_FIELD(model.mlp, "MoCo v2 projection head: Linear-ReLU-Linear instead of Linear"),
      MOCO_FIELD(
          model.pretrained,
          "the backbone moco_lincls and moco_dist --eval-only evaluate: a checkpoint folder, a checkpoints/ folder or "
          "a run's output_dir (its latest), a `moco_ckpt export` .h5 file, random (MoCo's initialisation from "
          "train.seed) or raw_pixels (the normalised pixels, no network); training ignores it"),
      MOCO_FIELD(moco.queue_size, "K, negatives in the queue; need not be a multiple of the batch"),
      MOCO_FIELD(moco.momentum, "m of the key encoder's update k = m*k + (1-m)*q"),
      MOCO_FIELD(moco.temperature, "T of the logits (0.07 in v1, 0.2 in v2)"),
      MOCO_FIELD(moco.bn_splits,
                 "BatchNorm groups in the global batch, keys shuffled across them (shuffle-BN): each of W ranks runs "
                 "bn_splits/W groups (one when bn_splits <= W), so any W dividing it computes the same; 1: plain BN on "
                 "one device"),
      MOCO_FIELD(data.dataset,
                 "fashion_mnist, mnist (IDX files under data.root), synthetic, imagefolder "
                 "(data.root/<split>/<class>/<image>.{jpg,jpeg,png}, RGB, classes sorted as torchvision; needs "
                 "data.augmentation v1 or v2), or hdf5 (an ImageFolder packed by moco_pack: "
                 "data.root/<split>-SSSSS-of-NNNNN.h5, the same samples in the same order; as imagefolder otherwise)"),
      MOCO_FIELD(data.root, "folder of the IDX files, or of the ImageFolder splits"),
      MOCO_FIELD(data.train_dir,
                 "imagefolder: the train split's folder under data.root; hdf5: its shards' prefix "
                 "(data.root/<train_dir>-*.h5)"),
      MOCO_FIELD(data.val_dir,
                 "imagefolder: the val split's folder under data.root, hdf5: its shards' prefix (the kNN monitor's "
                 "queries; its evaluation view is Resize(S*256/224) + CenterCrop(S), S = data.image_size)"),
      MOCO_FIELD(data.dct_scaling,
                 "imagefolder, hdf5: decode a JPEG at the smallest of libjpeg-turbo's DCT scales (1/8..1) that still "
                 "leaves each crop at least data.image_size px, before the antialiased resize (much faster on large "
                 "photos; false: always decode at full size)"),
      MOCO_FIELD(data.image_size, "side in pixels of the augmented crops"),
      MOCO_FIELD(
          data.augmentation,
          "simple (crop, flip, brightness/contrast jitter; batched, for the small greyscale sets), v1 (MoCo v1: crop, "
          "grayscale, colour jitter always, flip) or v2 (MoCo v2 aug+: crop, colour jitter with data.jitter_prob, "
          "grayscale, Gaussian blur with data.blur_prob, flip); v1/v2 equal torchvision's ops on uint8 images"),
      MOCO_FIELD(data.workers,
                 "decode/augmentation threads per rank; 0: on CUDA the rank's cores but one (its share of the node's, "
                 "or those it is bound to), on CPU 1"),
      MOCO_FIELD(data.prefetch, "batches prepared ahead of training"),
      MOCO_FIELD(data.synthetic_train_size, "images in the synthetic train split"),
      MOCO_FIELD(data.synthetic_test_size, "images in the synthetic test split"),
      MOCO_FIELD(data.synthetic_channels, "channels of synthetic images"),
      MOCO_FIELD(data.crop_scale_min, "smallest crop area of the random resized crop, as a fraction"),
      MOCO_FIELD(data.flip_prob, "probability of a horizontal flip"),
      MOCO_FIELD(data.jitter_prob,
                 "probability of the colour jitter (simple: brightness/contrast; v2: all four; v1 ignores it: always)"),
      MOCO_FIELD(data.brightness, "brightness factor range 1 +- this"),
      MOCO_FIELD(data.contrast, "contrast factor range 1 +- this"),
      MOCO_FIELD(data.saturation, "v1/v2: saturation factor range 1 +- this"),
      MOCO_FIELD(data.hue, "v1/v2: hue shift range +- this (at most 0.5; 0.4 in v1, 0.1 in v2)"),
      MOCO_FIELD(data.grayscale_prob, "v1/v2: probability of converting the view to greyscale"),
      MOCO_FIELD(data.blur_prob, "v2: probability of the Gaussian blur"),
      MOCO_FIELD(data.blur_sigma, "v2: [min, max] of the blur's sigma in pixels (kernel 2*ceil(3 sigma)+1)"),
      MOCO_FIELD(data.mean, "per-channel mean subtracted after scaling to [0,1]"),
      MOCO_FIELD(data.std, "per-channel std divided by after scaling to [0,1]"),
      MOCO_FIELD(optim.base_lr, "learning rate for a batch of 256; scaled linearly with the batch"),
      MOCO_FIELD(optim.batch_size, "images per step (the global batch)"),
      MOCO_FIELD(optim.momentum, "SGD momentum"),
      MOCO_FIELD(optim.weight_decay, "SGD weight decay"),
      MOCO_FIELD(optim.schedule, "step (x gamma at each milestone) or cosine"),
      MOCO_FIELD(optim.milestones, "epochs at which the step schedule multiplies the lr by gamma"),
      MOCO_FIELD(optim.gamma, "factor of the step schedule"),
      MOCO_FIELD(train.epochs, "length of training in epochs (may be fractional)"),
      MOCO_FIELD(train.time_budget_s,
                 "if > 0, training stops after this many seconds and the schedule runs over that time"),
      MOCO_FIELD(train.seed, "seed of initialisation, data order and augmentation"),
      MOCO_FIELD(train.log_every, "steps between log lines"),
      MOCO_FIELD(train.output_dir, "folder for metrics.jsonl and config.yaml"),
      MOCO_FIELD(train.threads, "intra-op threads; 0 uses the cores available to this process"),
      MOCO_FIELD(train.resume,
                 "auto: continue from the newest valid checkpoint in output_dir/checkpoints (start fresh if none); "
                 "never: refuse to start if one exists; or the path of one checkpoint folder"),
      MOCO_FIELD(train.stop_at_step,
                 "if > 0, end the run after this step with a checkpoint, the lr schedule still spanning train.epochs "
                 "(jobs sliced into time windows)"),
      MOCO_FIELD(
          train.tensorboard,
          "also write the metrics (loss, lr, img/s, acc@1/5, data wait, kNN) as TensorBoard events in output_dir/tb"),
      MOCO_FIELD(train.max_bad_steps,
                 "a step whose queries hold NaN or Inf on any rank is skipped by every rank (parameters, optimizer, "
                 "queue unchanged); this many in a row stop the run with an error; 0: stop at the first"),
      MOCO_FIELD(
          train.precision,
          "fp32, or bf16: the encoders' forward and backward run under autocast in bfloat16 (on CUDA, and on CPUs "
          "LibTorch supports); the loss, the logits, the queue, the momentum update and the optimizer stay in fp32"),
      MOCO_FIELD(train.channels_last,
                 "keep images and convolution weights in channels-last (NHWC) memory order, faster for convolutions on "
                 "tensor cores"),
      MOCO_FIELD(train.cudnn_benchmark,
                 "on CUDA: let cuDNN time its convolution algorithms on the first batches and keep the fastest (the "
                 "shapes do not change during a run)"),
      MOCO_FIELD(ckpt.every_steps, "steps between checkpoints; 0: off"),
      MOCO_FIELD(ckpt.every_minutes,
                 "minutes of training between checkpoints; 0: off (a final checkpoint is always written)"),
      MOCO_FIELD(ckpt.keep_last, "committed checkpoints kept, newest first (the one 'latest' names is never deleted)"),
      MOCO_FIELD(ckpt.keep_every_steps, "if > 0, checkpoints at multiples of this step are kept forever"),
      MOCO_FIELD(ckpt.async,
                 "write checkpoints in a background thread: training waits only for a copy of the state in host memory "
                 "(at most one save in flight)"),
      MOCO_FIELD(dist.bucket_mb, "MiB per gradient all-reduce bucket (several ranks)"),
      MOCO_FIELD(dist.first_bucket_mb, "MiB of the first bucket, small so that communication starts early in backward"),
      MOCO_FIELD(dist.broadcast_buffers,
                 "each step, both encoders' BatchNorm buffers are broadcast from rank 0 (the queue never is)"),
      MOCO_FIELD(dist.queue_check_every,
                 "steps between checks that every rank holds the same queue and pointer (and, with "
                 "dist.broadcast_buffers, started the step with the same BatchNorm buffers); 0: never"),
      MOCO_FIELD(dist.check_collectives,
                 "before each collective, verify that all ranks pass the same shapes and dtypes"),
      MOCO_FIELD(dist.timeout_s, "seconds after which a collective that has not completed is an error naming the rank"),
      MOCO_FIELD(dist.log_all_ranks, "every rank logs to the console (each always logs to output_dir/rank<N>.log)"),
      MOCO_FIELD(debug.anomaly_detection,
                 "autograd anomaly detection: an op that makes NaN or Inf in backward is named (slow)"),
      MOCO_FIELD(debug.check_invariants,
                 "each step, check that the key encoder moved by exactly m*k + (1-m)*q and got no gradient, and that "
                 "the queue holds unit keys and no graph (slow)"),
      MOCO_FIELD(knn.k, "neighbours of the kNN monitor"),
      MOCO_FIELD(knn.temperature, "temperature of the kNN vote weights exp(sim/T)"),
      MOCO_FIELD(knn.every_epochs, "also evaluate every this many epochs; 0: only before and after"),
      MOCO_FIELD(knn.batch_size, "images per feature-extraction batch"),
      MOCO_FIELD(knn.memory_size, "train images in the memory bank; 0: the whole train split"),
      MOCO_FIELD(knn.query_size, "test images scored; 0: the whole test split"),
      MOCO_FIELD(knn.raw_baseline,
                 "also score the raw normalised pixels, once per run (encoder raw_pixels): auto (images up to 64 px), "
                 "true, false"),
      MOCO_FIELD(lincls.epochs, "moco_lincls: epochs of the linear classifier"),
      MOCO_FIELD(lincls.base_lr,
                 "moco_lincls: SGD lr for a batch of 256, scaled linearly with lincls.batch_size (30: the official "
                 "value, for raw features)"),
      MOCO_FIELD(lincls.batch_size, "moco_lincls: images per step (the global batch)"),
      MOCO_FIELD(lincls.momentum, "moco_lincls: SGD momentum"),
      MOCO_FIELD(lincls.weight_decay, "moco_lincls: SGD weight decay"),
      MOCO_FIELD(lincls.milestones, "moco_lincls: epochs at which the lr is multiplied by lincls.gamma"),
      MOCO_FIELD(lincls.gamma, "moco_lincls: factor of the step schedule"),
      MOCO_FIELD(lincls.crop_scale_min,
                 "moco_lincls: smallest crop area of the training view's random resized crop (then a flip)"),
      MOCO_FIELD(lincls.cached_features,
                 "moco_lincls: extract the features of the un-augmented train images once and train the classifier on "
                 "them (fast; CPU, quick looks) instead of on a new augmented view of every image each epoch"),
      MOCO_FIELD(lincls.standardize,
                 "moco_lincls: shift and scale every feature dimension by its mean and std over the un-augmented train "
                 "split before the classifier (one lr then suits any encoder)"),
      MOCO_FIELD(lincls.save_every_epochs,
                 "moco_lincls: epochs between checkpoints; 0: only at the end (and when stopped)"),
  };
  return all;
}
#undef MOCO_FIELD

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(const std::string& where, const std::string& key) {
  std::string best;
  size_t best_distance = 4;  // suggest only near misses
  for (const auto& f : fields()) {
    const size_t d = edit_distance(key, f.key);
    if (d < best_distance) best_distance = d, best = f.key;
  }
  std::string msg = where + ": unknown key '" + key + "'";
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  return msg + "; 'moco_dist --help' lists every key";
}

const Field* find_field(const std::string& key) {
  for (const auto& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

bool is_section(const std::string& key) {
  for (const auto& f : fields())
    if (f.key.rfind(key + ".", 0) == 0) return true;
  return false;
}

void assign(Config& config, const Field& field, const YAML::Node& node, const std::string& where) {
  // "arch:" in a file, "model.arch=" on the command line: YAML reads nothing as null, not as "".
  if (!node.IsDefined() || node.IsNull())
    throw ConfigError(where + ": key '" + field.key + "' has no value (expects " + field.type + ")");
  try {
    field.set(config, node);
  } catch (const NotFinite&) {
    throw ConfigError(where + ": key '" + field.key + "' expects a finite " + field.type + ", got " +
                      (node.IsScalar() ? "'" + node.Scalar() + "'" : std::string("a list holding .nan or .inf")));
  } catch (const YAML::Exception&) {
    std::string shown =
        node.IsScalar() ? "'" + node.Scalar() + "'" : "a " + std::string(node.IsMap() ? "mapping" : "list");
    throw ConfigError(where + ": key '" + field.key + "' expects " + field.type + ", got " + shown);
  }
}

// "line 3" of a node, or nothing for nodes without a position (built in memory).
std::string line_of(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? std::string("?") : std::to_string(mark.line + 1);
}

// Walks a mapping, assigning each leaf to its field; every key must be known and appear once.
// yaml-cpp keeps both entries of a repeated key (a lookup finds the first, a walk sees both), so the
// repetition is caught here; unnoticed, the last one would win.
void apply_mapping(Config& config, const YAML::Node& map, const std::string& prefix, const std::string& where) {
  std::map<std::string, YAML::Node> seen;
  for (const auto& entry : map) {
    if (!entry.first.IsScalar())
      throw ConfigError(where + ": line " + line_of(entry.first) + ": a key must be a plain name");
    const std::string key = prefix + entry.first.as<std::string>();
    if (const auto before = seen.find(key); before != seen.end())
      throw ConfigError(where + ": key '" + key + "' is given twice (lines " + line_of(before->second) + " and " +
                        line_of(entry.first) + ")");
    seen.emplace(key, entry.first);
    if (const Field* field = find_field(key)) {
      assign(config, *field, entry.second, where);
    } else if (is_section(key)) {
      if (!entry.second.IsMap()) throw ConfigError(where + ": key '" + key + "' is a section and expects a mapping");
      apply_mapping(config, entry.second, key + ".", where);
    } else {
      throw ConfigError(unknown_key_message(where, key));
    }
  }
}

void require(bool ok, const std::string& where, const std::string& key, const std::string& what) {
  if (!ok) throw ConfigError(where + ": key '" + key + "' " + what);
}

}  // namespace

int64_t global_batch(const Config& c, Job job) {
  return job == Job::kLincls ? c.lincls.batch_size : c.optim.batch_size;
}
const char* global_batch_key(Job job) { return job == Job::kLincls ? "lincls.batch_size" : "optim.batch_size"; }

int64_t dataset_channels(const Config& c) {
  if (c.data.dataset == "synthetic") return c.data.synthetic_channels;
  return is_encoded_dataset(c) ? 3 : 1;  // ImageFolder images are decoded to RGB, as torchvision's loader does
}

bool is_encoded_dataset(const Config& c) { return c.data.dataset == "imagefolder" || c.data.dataset == "hdf5"; }

void validate_for_world(const Config& c, int world_size, const std::string& where, Job job) {
  require(global_batch(c, job) % world_size == 0, where, global_batch_key(job),
          fmt::format("({}) must be divisible by the number of ranks ({}): each rank takes an equal share",
                      global_batch(c, job), world_size));
}

namespace {

void validate(const Config& c, const std::string& where) {
  const std::set<std::string> archs{"resnet_tiny", "resnet18", "resnet34", "resnet50"};
  require(archs.count(c.model.arch) > 0, where, "model.arch",
          "must be one of resnet_tiny, resnet18, resnet34, resnet50, not '" + c.model.arch + "'");
  require(c.model.width >= 0, where, "model.width", "must be >= 0");
  require(c.model.dim > 0, where, "model.dim", "must be positive");
  require(c.model.stem_stride == 1 || c.model.stem_stride == 2, where, "model.stem_stride", "must be 1 or 2");
  require(c.model.stem_stride == 1 || c.model.small_stem, where, "model.stem_stride",
          "applies to the small stem only (model.small_stem: true)");
  require(c.moco.queue_size > 0, where, "moco.queue_size", "must be positive");
  require(c.moco.queue_size >= c.optim.batch_size, where, "moco.queue_size",
          "must be at least optim.batch_size (a step's keys must fit in the queue)");
  require(c.moco.momentum >= 0 && c.moco.momentum <= 1, where, "moco.momentum", "must lie in [0, 1]");
  require(c.moco.temperature > 0, where, "moco.temperature", "must be positive");
  require(c.moco.bn_splits >= 1 && c.optim.batch_size % c.moco.bn_splits == 0, where, "moco.bn_splits",
          "must be >= 1 and divide optim.batch_size");
  const std::set<std::string> datasets{"fashion_mnist", "mnist", "synthetic", "imagefolder", "hdf5"};
  require(datasets.count(c.data.dataset) > 0, where, "data.dataset",
          "must be one of fashion_mnist, mnist, synthetic, imagefolder, hdf5, not '" + c.data.dataset + "'");
  require(!is_encoded_dataset(c) || c.data.augmentation != "simple", where, "data.augmentation",
          "must be v1 or v2 with data.dataset " + c.data.dataset + " (the simple recipe needs images of one size)");
  require(!c.data.train_dir.empty() && !c.data.val_dir.empty(), where, "data.train_dir/val_dir", "must not be empty");
  require(c.data.image_size > 0, where, "data.image_size", "must be positive");
  require(c.data.workers >= 0, where, "data.workers", "must be 0 (from the cores) or a thread count");
  require(c.data.prefetch >= 1, where, "data.prefetch", "must be at least 1");
  require(c.data.synthetic_train_size > 0 && c.data.synthetic_test_size > 0, where, "data.synthetic_*_size",
          "must be positive");
  require(c.data.synthetic_channels >= 1, where, "data.synthetic_channels", "must be at least 1");
  require(c.data.crop_scale_min > 0 && c.data.crop_scale_min <= 1, where, "data.crop_scale_min", "must lie in (0, 1]");
  require(c.data.flip_prob >= 0 && c.data.flip_prob <= 1, where, "data.flip_prob", "must lie in [0, 1]");
  require(c.data.jitter_prob >= 0 && c.data.jitter_prob <= 1, where, "data.jitter_prob", "must lie in [0, 1]");
  require(c.data.brightness >= 0 && c.data.brightness < 1, where, "data.brightness", "must lie in [0, 1)");
  require(c.data.contrast >= 0 && c.data.contrast < 1, where, "data.contrast", "must lie in [0, 1)");
  require(c.data.augmentation == "simple" || c.data.augmentation == "v1" || c.data.augmentation == "v2", where,
          "data.augmentation", "must be simple, v1 or v2, not '" + c.data.augmentation + "'");
  require(c.data.saturation >= 0 && c.data.saturation < 1, where, "data.saturation", "must lie in [0, 1)");
  require(c.data.hue >= 0 && c.data.hue <= 0.5, where, "data.hue", "must lie in [0, 0.5]");
  require(c.data.grayscale_prob >= 0 && c.data.grayscale_prob <= 1, where, "data.grayscale_prob", "must lie in [0, 1]");
  require(c.data.blur_prob >= 0 && c.data.blur_prob <= 1, where, "data.blur_prob", "must lie in [0, 1]");
  require(c.data.blur_sigma.size() == 2 && c.data.blur_sigma[0] > 0 && c.data.blur_sigma[0] <= c.data.blur_sigma[1],
          where, "data.blur_sigma", "must be [min, max] with 0 < min <= max");
  require(!c.data.mean.empty(), where, "data.mean", "must not be empty");
  require(c.data.std.size() == c.data.mean.size(), where, "data.std", "must have as many values as data.mean");
  // Decided from the config alone, before any file is read: the IDX sets are greyscale, ImageFolder RGB.
  const int64_t channels = dataset_channels(c);
  for (const auto& [key, values] : {std::pair<const char*, const std::vector<double>*>{"data.mean", &c.data.mean},
                                    std::pair<const char*, const std::vector<double>*>{"data.std", &c.data.std}}) {
    const auto n = static_cast<int64_t>(values->size());
    require(n == 1 || n == channels, where, key,
            fmt::format("has {} values but data.dataset {} has {} channel(s){}: give 1 value{}", n, c.data.dataset,
                        channels, c.data.dataset == "synthetic" ? " (data.synthetic_channels)" : "",
                        channels > 1 ? fmt::format(" or {}", channels) : std::string()));
  }
  for (double s : c.data.std) require(s > 0, where, "data.std", "values must be positive");
  require(c.optim.base_lr > 0, where, "optim.base_lr", "must be positive");
  require(c.optim.batch_size > 0, where, "optim.batch_size", "must be positive");
  require(c.optim.momentum >= 0 && c.optim.momentum < 1, where, "optim.momentum", "must lie in [0, 1)");
  require(c.optim.weight_decay >= 0, where, "optim.weight_decay", "must be >= 0");
  require(c.optim.schedule == "step" || c.optim.schedule == "cosine", where, "optim.schedule",
          "must be step or cosine, not '" + c.optim.schedule + "'");
  require(c.train.precision == "fp32" || c.train.precision == "bf16", where, "train.precision",
          "must be fp32 or bf16, not '" + c.train.precision + "'");
  require(std::is_sorted(c.optim.milestones.begin(), c.optim.milestones.end()), where, "optim.milestones",
          "must be ascending");
  require(c.optim.gamma > 0, where, "optim.gamma", "must be positive");
  require(c.train.epochs > 0, where, "train.epochs", "must be positive");
  require(c.train.time_budget_s >= 0, where, "train.time_budget_s", "must be >= 0");
  require(c.train.log_every > 0, where, "train.log_every", "must be positive");
  require(!c.train.output_dir.empty(), where, "train.output_dir", "must not be empty");
  require(c.train.threads >= 0, where, "train.threads", "must be >= 0");
  require(!c.train.resume.empty(), where, "train.resume", "must be auto, never or the path of a checkpoint folder");
  require(c.train.stop_at_step >= 0, where, "train.stop_at_step", "must be >= 0");
  require(c.train.max_bad_steps >= 0, where, "train.max_bad_steps", "must be >= 0");
  require(c.ckpt.every_steps >= 0, where, "ckpt.every_steps", "must be >= 0");
  require(c.ckpt.every_minutes >= 0, where, "ckpt.every_minutes", "must be >= 0");
  require(c.ckpt.keep_last >= 1, where, "ckpt.keep_last", "must be at least 1");
  require(c.ckpt.keep_every_steps >= 0, where, "ckpt.keep_every_steps", "must be >= 0");
  require(c.dist.bucket_mb > 0 && c.dist.first_bucket_mb > 0, where, "dist.bucket_mb/first_bucket_mb",
          "must be positive");
  require(c.dist.queue_check_every >= 0, where, "dist.queue_check_every", "must be >= 0");
  require(c.dist.timeout_s > 0, where, "dist.timeout_s", "must be positive");
  require(c.knn.k > 0, where, "knn.k", "must be positive");
  require(c.knn.temperature > 0, where, "knn.temperature", "must be positive");
  require(c.knn.every_epochs >= 0, where, "knn.every_epochs", "must be >= 0");
  require(c.knn.batch_size > 0, where, "knn.batch_size", "must be positive");
  require(c.knn.memory_size >= 0 && c.knn.query_size >= 0, where, "knn.memory_size/query_size", "must be >= 0");
  require(c.knn.raw_baseline == "auto" || c.knn.raw_baseline == "true" || c.knn.raw_baseline == "false", where,
          "knn.raw_baseline", "must be auto, true or false, not '" + c.knn.raw_baseline + "'");
  require(c.lincls.epochs > 0, where, "lincls.epochs", "must be positive");
  require(c.lincls.base_lr > 0, where, "lincls.base_lr", "must be positive");
  require(c.lincls.batch_size > 0, where, "lincls.batch_size", "must be positive");
  require(c.lincls.momentum >= 0 && c.lincls.momentum < 1, where, "lincls.momentum", "must lie in [0, 1)");
  require(c.lincls.weight_decay >= 0, where, "lincls.weight_decay", "must be >= 0");
  require(std::is_sorted(c.lincls.milestones.begin(), c.lincls.milestones.end()), where, "lincls.milestones",
          "must be ascending");
  require(c.lincls.gamma > 0, where, "lincls.gamma", "must be positive");
  require(c.lincls.crop_scale_min > 0 && c.lincls.crop_scale_min <= 1, where, "lincls.crop_scale_min",
          "must lie in (0, 1]");
  require(c.lincls.save_every_epochs >= 0, where, "lincls.save_every_epochs", "must be >= 0");
}

}  // namespace

namespace {

Config apply_root(const YAML::Node& root, const std::string& where) {
  Config config;
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(where + ": the top level must be a mapping of sections");
    apply_mapping(config, root, "", where);
  }
  return config;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a folder, not a config file");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot open the config file");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.what());
  } catch (const std::exception& e) {  // a read error of the stream (std::ios_base::failure)
    throw ConfigError(path + ": cannot read the config file: " + e.what());
  }
  // An empty file (or one of comments only) would otherwise run every default: 200 epochs.
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(path + ": the config file is empty (write '{}' to run on every default)");
  Config config = apply_root(root, path);
  for (const auto& item : overrides) {
    const auto eq = item.find('=');
    const std::string where = "command-line override '" + item + "'";
    if (eq == std::string::npos || eq == 0) throw ConfigError(where + ": expected key=value");
    const std::string key = item.substr(0, eq);
    const Field* field = find_field(key);
    if (!field) throw ConfigError(unknown_key_message(where, key));
    YAML::Node value;
    try {
      value = YAML::Load(item.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw ConfigError(where + ": value is not valid YAML: " + e.what());
    }
    assign(config, *field, value, where);
  }
  validate(config, overrides.empty() ? path : path + " (with overrides)");
  return config;
}

Config load_config_text(const std::string& yaml, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": not valid YAML: " + e.what());
  }
  Config config = apply_root(root, where);
  validate(config, where);
  return config;
}

namespace {

bool changes_math(const std::string& key, Job job) {
  static const std::set<std::string> free_in_math_sections{"data.workers", "data.prefetch", "lincls.epochs",
                                                           "lincls.save_every_epochs"};
  if (free_in_math_sections.count(key)) return false;
  const std::string section = key.substr(0, key.find('.'));
  if (key == "train.seed" || section == "data") return true;
  if (job == Job::kLincls) return section == "model" || section == "lincls";
  return (section == "model" && key != "model.pretrained") || section == "moco" || section == "optim";
}

}  // namespace

std::vector<ConfigChange> config_changes(const Config& before, const Config& after, Job job) {
  std::vector<ConfigChange> changes;
  for (const auto& f : fields()) {
    YAML::Emitter a, b;
    a << YAML::Flow << f.get(before);
    b << YAML::Flow << f.get(after);
    if (std::string(a.c_str()) == b.c_str()) continue;
    changes.push_back({f.key, a.c_str(), b.c_str(), changes_math(f.key, job)});
  }
  return changes;
}

std::string to_yaml(const Config& config) {
  YAML::Node root;
  for (const auto& f : fields()) {
    const auto dot = f.key.find('.');
    root[f.key.substr(0, dot)][f.key.substr(dot + 1)] = f.get(config);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::string config_reference() {
  const Config defaults;
  std::ostringstream out;
  for (const auto& f : fields()) {
    YAML::Emitter value;
    value << YAML::Flow << f.get(defaults);
    out << "  " << f.key << " (" << f.type << ", default " << value.c_str() << ")\n      " << f.help << "\n";
  }
  return out.str();
}

}  // namespace moco::train
