#include "run/config.h"

#include "data/augment_params.h"
#include "model/vit.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <variant>

namespace moco::run {
namespace {

// The names an enum-valued key takes, and how its error lists them ("step or cosine").
template <typename E>
struct Choices {
  std::vector<std::pair<E, const char*>> names;
  const char* allowed;
};

const Choices<Arch>& choices(Arch) {
  static const Choices<Arch> c{{{Arch::kResnetTiny, "resnet_tiny"},
                                {Arch::kResnet18, "resnet18"},
                                {Arch::kResnet34, "resnet34"},
                                {Arch::kResnet50, "resnet50"},
                                {Arch::kVitTinyCpu, "vit_tiny_cpu"},
                                {Arch::kVitSmall, "vit_small"},
                                {Arch::kVitBase, "vit_base"}},
                               "one of resnet_tiny, resnet18, resnet34, resnet50, vit_tiny_cpu, vit_small, vit_base"};
  return c;
}
const Choices<Dataset>& choices(Dataset) {
  static const Choices<Dataset> c{{{Dataset::kFashionMnist, "fashion_mnist"},
                                   {Dataset::kMnist, "mnist"},
                                   {Dataset::kSynthetic, "synthetic"},
                                   {Dataset::kImageFolder, "imagefolder"},
                                   {Dataset::kHdf5, "hdf5"}},
                                  "one of fashion_mnist, mnist, synthetic, imagefolder, hdf5"};
  return c;
}
const Choices<data::Recipe>& choices(data::Recipe) {
  using data::Recipe;
  static const Choices<Recipe> c{{{Recipe::kSimple, data::recipe_name(Recipe::kSimple)},
                                  {Recipe::kV1, data::recipe_name(Recipe::kV1)},
                                  {Recipe::kV2, data::recipe_name(Recipe::kV2)},
                                  {Recipe::kV3, data::recipe_name(Recipe::kV3)}},
                                 "simple, v1, v2 or v3"};
  return c;
}
const Choices<data::Transforms>& choices(data::Transforms) {
  using data::Transforms;
  static const Choices<Transforms> c{{{Transforms::kPil, "pil"}, {Transforms::kTensor, "tensor"}}, "pil or tensor"};
  return c;
}
const Choices<Schedule>& choices(Schedule) {
  static const Choices<Schedule> c{{{Schedule::kStep, "step"}, {Schedule::kCosine, "cosine"}}, "step or cosine"};
  return c;
}
const Choices<LrUpdate>& choices(LrUpdate) {
  static const Choices<LrUpdate> c{{{LrUpdate::kEpoch, "epoch"}, {LrUpdate::kStep, "step"}}, "epoch or step"};
  return c;
}
const Choices<Precision>& choices(Precision) {
  static const Choices<Precision> c{{{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}, "fp32 or bf16"};
  return c;
}

const Choices<MocoVersion>& choices(MocoVersion) {
  static const Choices<MocoVersion> c{{{MocoVersion::kV2, "v2"}, {MocoVersion::kV3, "v3"}}, "v2 or v3"};
  return c;
}
const Choices<Optimizer>& choices(Optimizer) {
  static const Choices<Optimizer> c{
      {{Optimizer::kSgd, "sgd"}, {Optimizer::kLars, "lars"}, {Optimizer::kAdamw, "adamw"}}, "sgd, lars or adamw"};
  return c;
}

template <typename E>
const char* name_of(E value) {
  for (const auto& [e, name] : choices(value).names)
    if (e == value) return name;
  return "?";  // not reached: every enumerator has a name
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>)
    return "int";
  else if constexpr (std::is_same_v<T, uint64_t>)
    return "unsigned int";
  else if constexpr (std::is_same_v<T, double>)
    return "float";
  else if constexpr (std::is_same_v<T, std::string> || std::is_enum_v<T>)
    return "string";  // an enum is read and written as its name
  else
    return "list of float";
}

// Thrown by a float field given .nan or .inf: no key means anything by them, and a config holding
// one cannot be written back (to_yaml prints "nan", which YAML does not read as a float), so a
// checkpoint of the run could not be resumed.
struct NotFinite {};

// Thrown by an enum-valued field given a name it does not know. The loader holds it back until the
// config is validated (a later override may still fix it), then reports it as validate always did.
struct BadChoice {
  std::string what;
};

// One configurable value: its dotted key, how to read it from YAML, write it back and check its range.
struct Field {
  std::string key, type, help;
  std::function<void(Config&, const YAML::Node&)> set;  // throws YAML::Exception on a bad value
  std::function<YAML::Node(const Config&)> get;
  std::function<std::string(const Config&)> check;  // "must be positive" when out of range, "" when fine; may be empty
};

// Floats are written in their shortest exact form (0.07, not yaml-cpp's 0.070000000000000007).
template <typename T>
YAML::Node to_node(const T& value) {
  if constexpr (std::is_enum_v<T>)
    return YAML::Node(std::string(name_of(value)));
  else
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

template <typename T>
T read_value(const YAML::Node& node) {
  if constexpr (std::is_same_v<T, std::vector<double>>) {
    T value = node.IsScalar() ? T{node.as<double>()} : node.as<T>();  // "mean: 0.5" is a one-element list
    for (double v : value)
      if (!std::isfinite(v)) throw NotFinite{};
    return value;
  } else {
    if (!node.IsScalar()) throw YAML::Exception(node.Mark(), "not a scalar");
    if constexpr (std::is_enum_v<T>) {
      const auto name = node.as<std::string>();
      for (const auto& [e, known] : choices(T{}).names)
        if (name == known) return e;
      throw BadChoice{fmt::format("must be {}, not '{}'", choices(T{}).allowed, name)};
    } else {
      const T value = node.as<T>();
      if constexpr (std::is_same_v<T, double>)
        if (!std::isfinite(value)) throw NotFinite{};
      return value;
    }
  }
}

// A key's own range: what is wrong with a value ("must be positive"), or "" when it is allowed.
template <typename T>
using Rule = std::function<std::string(const T&)>;

// A row of the key table, typed: the key, its help, the member it binds, and its range rule if any.
template <typename T>
struct FieldOf {
  std::string key, help;
  T& (*member)(Config&);
  Rule<T> rule;

  FieldOf must(Rule<T> r) && {
    rule = std::move(r);
    return std::move(*this);
  }

  operator Field() const {  // NOLINT(google-explicit-constructor): rows are written as a list of fields
    Field f{key, type_name<T>(), help, nullptr, nullptr, nullptr};
    auto access = member;
    f.set = [access](Config& c, const YAML::Node& node) { access(c) = read_value<T>(node); };
    f.get = [access](const Config& c) { return to_node(access(const_cast<Config&>(c))); };
    if (rule) f.check = [access, r = rule](const Config& c) { return r(access(const_cast<Config&>(c))); };
    return f;
  }
};

// The rules the rows use; each message is the one validate gave before the rows checked themselves.
const auto positive = [](const auto& v) -> std::string { return v > 0 ? "" : "must be positive"; };
const auto non_negative = [](const auto& v) -> std::string { return v >= 0 ? "" : "must be >= 0"; };
const auto at_least_one = [](const auto& v) -> std::string { return v >= 1 ? "" : "must be at least 1"; };
const auto one_or_two = [](const int64_t& v) -> std::string { return v == 1 || v == 2 ? "" : "must be 1 or 2"; };
// More threads than any machine runs is a typo: started all the same, an OpenMP pool of 100000
// spinning threads held a 2-core host for minutes (and ignored SIGTERM) before the first step.
constexpr int kMostThreads = 1024;
const auto thread_count = [](const int& v) -> std::string {
  if (v >= 0 && v <= kMostThreads) return "";
  return fmt::format("must be 0 (from the cores) or a thread count up to {}, not {}", kMostThreads, v);
};
const auto not_empty = [](const std::string& v) -> std::string { return v.empty() ? "must not be empty" : ""; };
const auto resume_target = [](const std::string& v) -> std::string {
  return v.empty() ? "must be auto, never or the path of a checkpoint folder" : "";
};
const auto auto_true_false = [](const std::string& v) -> std::string {
  return v == "auto" || v == "true" || v == "false" ? "" : "must be auto, true or false, not '" + v + "'";
};
const auto spread_or_first = [](const std::string& v) -> std::string {
  return v == "spread" || v == "first" ? "" : "must be spread or first, not '" + v + "'";
};
// Epochs of a step schedule: a negative one would multiply the lr before training starts.
const auto milestone_epochs = [](const std::vector<double>& v) -> std::string {
  for (double epoch : v)
    if (epoch < 0) return fmt::format("holds {}: milestones are epochs, at least 0", epoch);
  return std::is_sorted(v.begin(), v.end()) ? "" : "must be ascending";
};
Rule<double> lies_in(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string what = fmt::format("must lie in {}{}, {}{}", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
  return [=](const double& v) -> std::string {
    const bool above = lo_open ? v > lo : v >= lo, below = hi_open ? v < hi : v <= hi;
    return above && below ? "" : what;
  };
}
Rule<double> in_closed(double lo, double hi) { return lies_in(lo, hi, false, false); }
Rule<double> in_open_closed(double lo, double hi) { return lies_in(lo, hi, true, false); }
Rule<double> in_closed_open(double lo, double hi) { return lies_in(lo, hi, false, true); }

// MOCO_FIELD(model.dim, help): the key is the member's path. MOCO_BOUND("data.x", data.y, help): a key
// bound to a member of another name. (The augmentation's keys are rows of data/augment_params.h instead.)
#define MOCO_BOUND(key, path, help)                              \
  FieldOf<std::decay_t<decltype(std::declval<Config>().path)>> { \
    key, help, [](Config & c) -> auto& { return c.path; }        \
    , {}                                                         \
  }
#define MOCO_FIELD(path, help) MOCO_BOUND(#path, path, help)

std::vector<Field> model_moco_fields() {
  return {
      MOCO_FIELD(model.method,
                 "v2: MoCo v1/v2 with the queue (v1 or v2 as model.mlp, moco.temperature and data.augmentation say); "
                 "v3: MoCo v3 (projector and predictor, symmetric loss over the gathered keys, the v3.* keys)"),
      MOCO_FIELD(model.arch,
                 "encoder: resnet_tiny (~1.3M parameters with the MLP head), resnet18, resnet34, resnet50; with "
                 "model.method v3 also vit_small, vit_base (MoCo v3's ViT-S/16, ViT-B/16) and vit_tiny_cpu (patch 4, "
                 "dim 64, 4 blocks of 4 heads, for 28-32 px images); a ViT is built for data.image_size"),
      MOCO_FIELD(model.small_stem, "3x3 stride-1 first conv and no max-pool, for 28-32 px images"),
      MOCO_FIELD(
          model.stem_stride,
          "stride of the small stem's conv: 2 halves every feature map (about 4x fewer FLOPs, for speed on CPUs)")
          .must(one_or_two),
      MOCO_FIELD(model.width, "width multiplier of every stage; 0 keeps the architecture's own").must(non_negative),
      MOCO_FIELD(model.dim, "dimension of queries and keys").must(positive),
      MOCO_FIELD(model.mlp, "MoCo v2 projection head: Linear-ReLU-Linear instead of Linear"),
      MOCO_FIELD(
          model.pretrained,
          "the backbone moco_lincls and moco_dist --eval-only evaluate: a checkpoint folder, a checkpoints/ folder or "
          "a run's output_dir (its latest), a `moco_ckpt export` .h5 file, random (MoCo's initialisation from "
          "train.seed) or raw_pixels (the normalised pixels, no network); training ignores it"),
      MOCO_FIELD(moco.queue_size, "K, negatives in the queue; need not be a multiple of the batch").must(positive),
      MOCO_FIELD(moco.momentum, "m of the key encoder's update k = m*k + (1-m)*q").must(in_closed(0, 1)),
      MOCO_FIELD(moco.temperature, "T of the logits (0.07 in v1, 0.2 in v2)").must(positive),
      MOCO_FIELD(moco.bn_splits,
                 "BatchNorm groups in the global batch, keys shuffled across them (shuffle-BN): each of W ranks runs "
                 "bn_splits/W groups (one when bn_splits <= W), so any W dividing it computes the same; 1: plain BN on "
                 "one device"),
      MOCO_FIELD(v3.mlp_dim, "model.method v3: hidden width of the projector and predictor MLPs").must(positive),
      MOCO_FIELD(v3.projector_layers,
                 "model.method v3: Linear layers of the projector on the pooled features (2: the official ResNet "
                 "builder, 3: its ViT builder; BN and ReLU between, a BN without affine last; its output is model.dim)")
          .must(at_least_one),
      MOCO_FIELD(v3.predictor_layers,
                 "model.method v3: Linear layers of the predictor on the query side (BN and ReLU between, none last)")
          .must(at_least_one),
      MOCO_FIELD(v3.momentum,
                 "model.method v3: m0, the momentum encoder's m at the first step; m = 1 - (1-m0)(cos(pi p)+1)/2 at "
                 "progress p of the run")
          .must(in_closed(0, 1)),
      MOCO_FIELD(v3.temperature, "model.method v3: T of the logits; each loss term is scaled by 2T").must(positive),
      MOCO_FIELD(v3.stop_grad_conv1,
                 "model.method v3 with a ViT: the patch projection (patch_embed.proj) keeps its random initialisation, "
                 "no gradient (main_moco.py --stop-grad-conv1)"),
  };
}

// A row of data/augment_params.h (the augmentation's keys) as a field bound to its AugmentOptions
// member, checked by the table's own range.
Field augment_field(const data::AugmentParam& param) {
  return std::visit(
      [&param](auto member) {
        using T = std::decay_t<decltype(std::declval<data::AugmentOptions>().*member)>;
        Field f{param.key, type_name<T>(), param.help, nullptr, nullptr, nullptr};
        f.set = [member](Config& c, const YAML::Node& node) { c.data.augment.*member = read_value<T>(node); };
        f.get = [member](const Config& c) { return to_node(c.data.augment.*member); };
        f.check = [param](const Config& c) { return data::range_error(param, c.data.augment); };
        return f;
      },
      param.member);
}

void add_augment_fields(std::vector<Field>& fields, data::ParamGroup group) {
  for (const auto& param : data::augment_params())
    if (param.group == group) fields.push_back(augment_field(param));
}

// The dataset's keys, the augmentation's pipeline (its table's rows), the loader's, the ops' parameters.
std::vector<Field> data_fields() {
  std::vector<Field> rows = {
      MOCO_FIELD(data.dataset,
                 "fashion_mnist, mnist (IDX files under data.root), synthetic, imagefolder "
                 "(data.root/<split>/<class>/<image>.{jpg,jpeg,png}, RGB, classes sorted as torchvision; needs "
                 "data.augmentation v1, v2 or v3), or hdf5 (an ImageFolder packed by moco_pack: "
                 "data.root/<split>-SSSSS-of-NNNNN.h5, the same samples in the same order; as imagefolder otherwise)"),
      MOCO_FIELD(data.root, "folder of the IDX files, or of the ImageFolder splits"),
      MOCO_FIELD(data.train_dir,
                 "imagefolder: the train split's folder under data.root; hdf5: its shards' prefix "
                 "(data.root/<train_dir>-*.h5)"),
      MOCO_FIELD(data.val_dir,
                 "imagefolder: the val split's folder under data.root, hdf5: its shards' prefix (the kNN monitor's "
                 "queries; its evaluation view is Resize(S*256/224) + CenterCrop(S), S = data.image_size)"),
  };
  add_augment_fields(rows, data::ParamGroup::kPipeline);
  const std::vector<Field> loader = {
      MOCO_FIELD(data.workers,
                 "decode/augmentation threads per rank; 0: on CUDA the rank's cores but one (its share of the node's, "
                 "or those it is bound to), on CPU 1")
          .must(thread_count),
      MOCO_FIELD(data.prefetch, "batches prepared ahead of training").must(at_least_one),
      MOCO_FIELD(data.synthetic_train_size, "images in the synthetic train split"),
      MOCO_FIELD(data.synthetic_test_size, "images in the synthetic test split"),
      MOCO_FIELD(data.synthetic_channels, "channels of synthetic images").must(at_least_one),
  };
  rows.insert(rows.end(), loader.begin(), loader.end());
  add_augment_fields(rows, data::ParamGroup::kOps);
  return rows;
}

std::vector<Field> optim_train_fields() {
  return {
      MOCO_FIELD(optim.base_lr, "learning rate for a batch of 256; scaled linearly with the batch").must(positive),
      MOCO_FIELD(optim.batch_size, "images per step (the global batch)").must(positive),
      MOCO_FIELD(optim.optimizer,
                 "sgd (SGD with momentum); model.method v3 also lars (momentum SGD whose update of each weight matrix "
                 "is scaled by 0.001 |w|/|g + wd w|; biases and BN parameters get neither weight decay nor scaling) or "
                 "adamw (torch.optim.AdamW: betas 0.9, 0.999, eps 1e-8, decoupled weight decay on every parameter)"),
      MOCO_FIELD(optim.momentum, "SGD and LARS momentum").must(in_closed_open(0, 1)),
      MOCO_FIELD(optim.weight_decay, "weight decay (AdamW's decoupled: p *= 1 - lr wd)").must(non_negative),
      MOCO_FIELD(optim.warmup_epochs, "epochs over which the lr rises linearly from 0 before the schedule; 0: none")
          .must(non_negative),
      MOCO_FIELD(optim.schedule, "step (x gamma at each milestone) or cosine"),
      MOCO_FIELD(optim.milestones, "epochs at which the step schedule multiplies the lr by gamma")
          .must(milestone_epochs),
      MOCO_FIELD(optim.gamma, "factor of the step schedule").must(positive),
      MOCO_FIELD(optim.lr_update,
                 "epoch: the lr is set at each epoch's start from the integer epoch (main_moco.py; under "
                 "train.time_budget_s the whole epochs of the budget spent, if ahead); step: every step from the "
                 "fractional epoch"),
      MOCO_FIELD(train.epochs, "length of training in epochs (may be fractional)").must(positive),
      MOCO_FIELD(train.time_budget_s,
                 "if > 0, training stops after this many seconds and the schedule runs over that time")
          .must(non_negative),
      MOCO_FIELD(train.seed, "seed of initialisation, data order and augmentation"),
      MOCO_FIELD(train.log_every, "steps between log lines").must(positive),
      MOCO_FIELD(train.output_dir, "folder for metrics.jsonl and config.yaml").must(not_empty),
      MOCO_FIELD(train.threads,
                 "intra-op threads; 0: the rank's cores (those it is bound to, or its share of the node's when "
                 "unbound: node cores / ranks on the node)")
          .must(thread_count),
      MOCO_FIELD(train.resume,
                 "auto: continue from the newest checkpoint in output_dir/checkpoints that loads (start fresh if "
                 "there is none; refuse if there are some and none loads); never: start fresh, keeping an earlier "
                 "run's checkpoints/, metrics.jsonl, config.yaml and tb/ aside as NAME.N; or the path of one "
                 "checkpoint folder")
          .must(resume_target),
      MOCO_FIELD(train.stop_at_step,
                 "if > 0, end the run after this step with a checkpoint, the lr schedule still spanning train.epochs "
                 "(jobs sliced into time windows)")
          .must(non_negative),
      MOCO_FIELD(
          train.tensorboard,
          "also write the metrics (loss, lr, img/s, acc@1/5, data wait, kNN) as TensorBoard events in output_dir/tb"),
      MOCO_FIELD(train.max_bad_steps,
                 "a step whose queries, keys, loss or gradients hold NaN or Inf on any rank is skipped by every rank "
                 "(parameters, optimizer, key encoder, BatchNorm statistics, queue unchanged); this many in a row stop "
                 "the run with an error; 0: stop at the first")
          .must(non_negative),
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
  };
}

std::vector<Field> ckpt_dist_debug_fields() {
  return {
      MOCO_FIELD(ckpt.every_steps, "steps between checkpoints; 0: off").must(non_negative),
      MOCO_FIELD(ckpt.every_minutes,
                 "minutes of training between checkpoints; 0: off (a final checkpoint is always written)")
          .must(non_negative),
      MOCO_FIELD(ckpt.keep_last, "committed checkpoints kept, newest first (the one 'latest' names is never deleted)")
          .must(at_least_one),
      MOCO_FIELD(ckpt.keep_every_steps, "if > 0, checkpoints at multiples of this step are kept forever")
          .must(non_negative),
      MOCO_FIELD(ckpt.async,
                 "write checkpoints in a background thread: training waits only for a copy of the state in host memory "
                 "(at most one save in flight)"),
      MOCO_FIELD(dist.bucket_mb, "MiB per gradient all-reduce bucket (several ranks)"),
      MOCO_FIELD(dist.first_bucket_mb, "MiB of the first bucket, small so that communication starts early in backward"),
      MOCO_FIELD(dist.broadcast_buffers,
                 "each step, both encoders' BatchNorm buffers are broadcast from rank 0 (the queue never is)"),
      MOCO_FIELD(dist.queue_check_every,
                 "steps between checks that every rank holds the same queue and pointer (and, with "
                 "dist.broadcast_buffers, started the step with the same BatchNorm buffers); 0: never")
          .must(non_negative),
      MOCO_FIELD(dist.check_collectives,
                 "before each collective, verify that all ranks pass the same shapes and dtypes"),
      MOCO_FIELD(dist.timeout_s, "seconds after which a collective that has not completed is an error naming the rank")
          .must(positive),
      MOCO_FIELD(dist.log_all_ranks, "every rank logs to the console (each always logs to output_dir/rank<N>.log)"),
      MOCO_FIELD(dist.world_group_at_one,
                 "a world of one still takes the MPI group (NCCL for CUDA tensors) and runs the collectives of several "
                 "ranks in training: the gradient buckets' all-reduces from their hooks, the per-step BatchNorm "
                 "broadcast, the key "
                 "shuffle's all-to-all, the replica check (a device check; the same bits as without); false: a local "
                 "group, and none of them"),
      MOCO_FIELD(debug.anomaly_detection,
                 "autograd anomaly detection: an op that makes NaN or Inf in backward is named (slow)"),
      MOCO_FIELD(debug.check_invariants,
                 "each step, check that the key encoder moved by exactly m*k + (1-m)*q and got no gradient, and that "
                 "the queue holds unit keys and no graph (slow)"),
      MOCO_FIELD(debug.check_step_syncs,
                 "a call that makes the host wait for the device inside a training step, up to its reports (log "
                 "steps, checkpoints, epoch ends), is an error naming the op (CUDA: any such call; every device: "
                 "the trainer's counted host reads); not with debug.check_invariants, which reads inside the step"),
  };
}

std::vector<Field> knn_lincls_fields() {
  return {
      MOCO_FIELD(knn.k, "neighbours of the kNN monitor").must(positive),
      MOCO_FIELD(knn.temperature, "temperature of the kNN vote weights exp(sim/T)").must(positive),
      MOCO_FIELD(knn.every_epochs, "also evaluate every this many epochs; 0: only before and after").must(non_negative),
      MOCO_FIELD(knn.batch_size, "images per feature-extraction batch").must(positive),
      MOCO_FIELD(knn.memory_size, "train images in the memory bank (knn.subset); 0: the whole train split"),
      MOCO_FIELD(knn.query_size, "test images scored (knn.subset); 0: the whole test split"),
      MOCO_FIELD(knn.subset,
                 "the images knn.memory_size and knn.query_size take: spread (evenly over the split, so a split stored "
                 "class by class gives every class) or first (the split's first ones, for a split in random order)")
          .must(spread_or_first),
      MOCO_FIELD(knn.raw_baseline,
                 "also score the raw normalised pixels, once per run (encoder raw_pixels): auto (images up to 64 px), "
                 "true, false")
          .must(auto_true_false),
      MOCO_FIELD(eval.online_probe,
                 "train a linear classifier on the detached, pooled query features of the labelled train batches "
                 "alongside the method (its own SGD, no gradient into the encoder) and log its test top-1 at each "
                 "epoch's end (event probe)"),
      MOCO_FIELD(eval.probe_lr, "the online probe's SGD lr (momentum 0.9, no weight decay), constant").must(positive),
      MOCO_FIELD(eval.probe_val_size,
                 "test images, evenly spaced over the split, the online probe is scored on; 0: the whole test split")
          .must(non_negative),
      MOCO_FIELD(lincls.epochs, "moco_lincls: epochs of the linear classifier").must(positive),
      MOCO_FIELD(lincls.base_lr,
                 "moco_lincls: SGD lr for a batch of 256, scaled linearly with lincls.batch_size (30: the official "
                 "value, for raw features)")
          .must(positive),
      MOCO_FIELD(lincls.batch_size, "moco_lincls: images per step (the global batch)").must(positive),
      MOCO_FIELD(lincls.momentum, "moco_lincls: SGD momentum").must(in_closed_open(0, 1)),
      MOCO_FIELD(lincls.weight_decay, "moco_lincls: SGD weight decay").must(non_negative),
      MOCO_FIELD(lincls.schedule,
                 "moco_lincls: step (x lincls.gamma at each milestone; MoCo v1/v2's main_lincls.py) or cosine over "
                 "lincls.epochs, set at each epoch's start (MoCo v3's)"),
      MOCO_FIELD(lincls.milestones, "moco_lincls: epochs at which the lr is multiplied by lincls.gamma (step)")
          .must(milestone_epochs),
      MOCO_FIELD(lincls.gamma, "moco_lincls: factor of the step schedule").must(positive),
      MOCO_FIELD(lincls.crop_scale_min,
                 "moco_lincls: smallest crop area of the training view's random resized crop (then a flip)")
          .must(in_open_closed(0, 1)),
      MOCO_FIELD(lincls.cached_features,
                 "moco_lincls: extract the features of the un-augmented train images once and train the classifier on "
                 "them (fast; CPU, quick looks) instead of on a new augmented view of every image each epoch"),
      MOCO_FIELD(lincls.standardize,
                 "moco_lincls: shift and scale every feature dimension by its mean and std over the un-augmented train "
                 "split before the classifier (one lr then suits any encoder)"),
      MOCO_FIELD(lincls.save_every_epochs,
                 "moco_lincls: epochs between checkpoints; 0: only at the end (and when stopped)")
          .must(non_negative),
  };
}

// Every key, in the order to_yaml writes them and --help lists them.
const std::vector<Field>& fields() {
  static const std::vector<Field> all = [] {
    std::vector<Field> list;
    for (auto section :
         {&model_moco_fields, &data_fields, &optim_train_fields, &ckpt_dist_debug_fields, &knn_lincls_fields})
      for (auto& f : section()) list.push_back(std::move(f));
    return list;
  }();
  return all;
}
#undef MOCO_FIELD
#undef MOCO_BOUND

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

// A config being read, and the enum values it was given that name nothing (key -> what validate
// reports), held back so that a later override can still replace them.
struct Reading {
  Config config;
  std::map<std::string, std::string> bad_choices;
};

void assign(Reading& reading, const Field& field, const YAML::Node& node, const std::string& where) {
  // "arch:" in a file, "model.arch=" on the command line: YAML reads nothing as null, not as "".
  if (!node.IsDefined() || node.IsNull())
    throw ConfigError(where + ": key '" + field.key + "' has no value (expects " + field.type + ")");
  try {
    field.set(reading.config, node);
    reading.bad_choices.erase(field.key);
  } catch (const BadChoice& bad) {
    reading.bad_choices[field.key] = bad.what;
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
void apply_mapping(Reading& reading, const YAML::Node& map, const std::string& prefix, const std::string& where) {
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
      assign(reading, *field, entry.second, where);
    } else if (is_section(key)) {
      if (!entry.second.IsMap()) throw ConfigError(where + ": key '" + key + "' is a section and expects a mapping");
      apply_mapping(reading, entry.second, key + ".", where);
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

const char* to_string(Arch arch) { return name_of(arch); }
bool is_vit(Arch arch) { return arch == Arch::kVitTinyCpu || arch == Arch::kVitSmall || arch == Arch::kVitBase; }
const char* to_string(Dataset dataset) { return name_of(dataset); }
const char* to_string(Schedule schedule) { return name_of(schedule); }
const char* to_string(LrUpdate update) { return name_of(update); }
const char* to_string(Precision precision) { return name_of(precision); }
const char* to_string(MocoVersion version) { return name_of(version); }
const char* to_string(Optimizer optimizer) { return name_of(optimizer); }

data::AugmentOptions default_augment_options() {
  data::AugmentOptions o;
  o.mean = {0.2860};  // Fashion-MNIST's pixel statistics
  o.std = {0.3530};
  return o;
}

int64_t dataset_channels(const Config& c) {
  if (c.data.dataset == Dataset::kSynthetic) return c.data.synthetic_channels;
  return is_encoded_dataset(c) ? 3 : 1;  // ImageFolder images are decoded to RGB, as torchvision's loader does
}

bool is_encoded_dataset(const Config& c) {
  return c.data.dataset == Dataset::kImageFolder || c.data.dataset == Dataset::kHdf5;
}

void validate_for_world(const Config& c, int world_size, const std::string& where, Job job) {
  require(global_batch(c, job) % world_size == 0, where, global_batch_key(job),
          fmt::format("({}) must be divisible by the number of ranks ({}): each rank takes an equal share",
                      global_batch(c, job), world_size));
  if (job == Job::kMoco) check_queue_fits(c, where);
  check_batch_fits(c, world_size, where, job);
}

namespace {
double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

// A rank's batch of augmented views (two for MoCo, one for the linear protocol; float32) must fit
// in memory, or the first step fails (or the machine swaps) long after the folder was made.
void check_batch_fits(const Config& c, int world_size, const std::string& where, Job job) {
  const int64_t views = job == Job::kMoco ? 2 : 1, side = c.data.augment.out_size;
  const double images = static_cast<double>(global_batch(c, job) / world_size) * static_cast<double>(views);
  const double bytes =
      4.0 * images * static_cast<double>(dataset_channels(c)) * static_cast<double>(side) * static_cast<double>(side);
  const double memory = physical_memory_bytes();
  require(memory <= 0 || bytes <= memory, where, "data.image_size",
          fmt::format("({}) with {} {} on {} rank(s) makes a batch of {} views of {}x{}x{} float32 per rank, {:.0f} "
                      "bytes: more than this machine's {:.0f} bytes of memory",
                      side, global_batch_key(job), global_batch(c, job), world_size, images, dataset_channels(c), side,
                      side, bytes, memory));
}

// Every rank holds the whole queue (model.dim x moco.queue_size float32): one larger than this
// machine's memory is the config's fault, said before any work.
void check_queue_fits(const Config& c, const std::string& where) {
  const double bytes = 4.0 * static_cast<double>(c.model.dim) * static_cast<double>(c.moco.queue_size);
  const double memory = physical_memory_bytes();
  require(memory <= 0 || bytes <= memory, where, "moco.queue_size",
          fmt::format("({}) makes a queue of {} x {} float32, {:.0f} bytes: more than this machine's {:.0f} bytes of "
                      "memory",
                      c.moco.queue_size, c.model.dim, c.moco.queue_size, bytes, memory));
}

namespace {

// Each key's own rule (its row), in the order of the rows; a name an enum-valued key did not know
// is reported at its row.
void check_rows(const Reading& reading, const std::string& where) {
  for (const auto& f : fields()) {
    if (const auto bad = reading.bad_choices.find(f.key); bad != reading.bad_choices.end())
      require(false, where, f.key, bad->second);
    if (f.check) {
      const std::string what = f.check(reading.config);
      require(what.empty(), where, f.key, what);
    }
  }
}

// data.mean and data.std against each other and the dataset's channels, decided from the config
// alone before any file is read: the IDX sets are greyscale, ImageFolder RGB.
void check_normalisation(const Config& c, const std::string& where) {
  const auto& a = c.data.augment;
  require(!a.mean.empty(), where, "data.mean", "must not be empty");
  require(a.std.size() == a.mean.size(), where, "data.std", "must have as many values as data.mean");
  const int64_t channels = dataset_channels(c);
  for (const auto& [key, values] : {std::pair<const char*, const std::vector<double>*>{"data.mean", &a.mean},
                                    std::pair<const char*, const std::vector<double>*>{"data.std", &a.std}}) {
    const auto n = static_cast<int64_t>(values->size());
    require(n == 1 || n == channels, where, key,
            fmt::format("has {} values but data.dataset {} has {} channel(s){}: give 1 value{}", n, c.data.dataset,
                        channels, c.data.dataset == Dataset::kSynthetic ? " (data.synthetic_channels)" : "",
                        channels > 1 ? fmt::format(" or {}", channels) : std::string()));
  }
  for (double s : a.std) require(s > 0, where, "data.std", "values must be positive");
}

// v3's per-view keys do nothing in the other recipes: a value other than the default there would be
// silently ignored, so it is refused, naming the key.
void check_v3_view_keys(const Config& c, const std::string& where) {
  const data::AugmentOptions& a = c.data.augment;
  if (a.recipe == data::Recipe::kV3) return;
  const data::AugmentOptions defaults;
  const std::string only = "applies to data.augmentation v3 only, not " + std::string(data::recipe_name(a.recipe));
  require(a.key_blur_prob == defaults.key_blur_prob, where, "data.key_blur_prob", only);
  require(a.solarize_prob == defaults.solarize_prob, where, "data.solarize_prob", only);
  require(a.key_solarize_prob == defaults.key_solarize_prob, where, "data.key_solarize_prob", only);
}

// Combinations that would not run as they read: v1/v2 train with SGD only; v3 has heads of its own
// and neither the queue's invariants nor a time budget.
void check_method_keys(const Config& c, const std::string& where) {
  if (c.model.method == MocoVersion::kV2) {
    require(!is_vit(c.model.arch), where, "model.arch",
            fmt::format("{} needs model.method v3 (MoCo v1/v2 train ResNets only)", c.model.arch));
    require(c.optim.optimizer == Optimizer::kSgd, where, "optim.optimizer",
            "must be sgd with model.method v2 (MoCo v1/v2 train with SGD; lars and adamw are for model.method v3)");
    return;
  }
  if (is_vit(c.model.arch)) {
    const int64_t patch = model::vit_options_for(to_string(c.model.arch)).patch_size;
    require(c.data.augment.out_size % patch == 0, where, "data.image_size",
            fmt::format("({}) must be a multiple of {}'s patch size {}: the ViT's grid of patches covers the image",
                        c.data.augment.out_size, c.model.arch, patch));
  }
  const std::string v3 = "cannot be used with model.method v3";
  require(!c.model.mlp, where, "model.mlp", v3 + ": its head is the projector and predictor (v3.*)");
  require(!c.debug.check_invariants, where, "debug.check_invariants", v3 + ": its checks are of the queue (v1/v2)");
  require(c.train.time_budget_s == 0, where, "train.time_budget_s",
          v3 + " yet: its momentum schedule follows the steps of train.epochs");
}

// The rows first, then what involves more than one key.
void validate(const Reading& reading, const std::string& where) {
  check_rows(reading, where);
  const Config& c = reading.config;
  require(c.model.stem_stride == 1 || c.model.small_stem, where, "model.stem_stride",
          "applies to the small stem only (model.small_stem: true)");
  require(c.moco.queue_size >= c.optim.batch_size, where, "moco.queue_size",
          "must be at least optim.batch_size (a step's keys must fit in the queue)");
  require(c.moco.bn_splits >= 1 && c.optim.batch_size % c.moco.bn_splits == 0, where, "moco.bn_splits",
          "must be >= 1 and divide optim.batch_size");
  require(!is_encoded_dataset(c) || c.data.augment.recipe != data::Recipe::kSimple, where, "data.augmentation",
          fmt::format("must be v1, v2 or v3 with data.dataset {} (the simple recipe needs images of one size)",
                      c.data.dataset));
  require(!c.data.train_dir.empty() && !c.data.val_dir.empty(), where, "data.train_dir/val_dir", "must not be empty");
  require(c.data.synthetic_train_size > 0 && c.data.synthetic_test_size > 0, where, "data.synthetic_*_size",
          "must be positive");
  check_normalisation(c, where);
  check_v3_view_keys(c, where);
  require(c.dist.bucket_mb > 0 && c.dist.first_bucket_mb > 0, where, "dist.bucket_mb/first_bucket_mb",
          "must be positive");
  require(c.knn.memory_size >= 0 && c.knn.query_size >= 0, where, "knn.memory_size/query_size", "must be >= 0");
  require(!(c.debug.check_invariants && c.debug.check_step_syncs), where, "debug.check_invariants",
          "cannot be on with debug.check_step_syncs: its checks read the step's results on the host inside the step");
  require(c.optim.schedule != Schedule::kCosine || c.optim.warmup_epochs < c.train.epochs, where, "optim.warmup_epochs",
          "must be less than train.epochs with the cosine schedule");
  check_method_keys(c, where);
}

}  // namespace

namespace {

Reading apply_root(const YAML::Node& root, const std::string& where) {
  Reading reading;
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(where + ": the top level must be a mapping of sections");
    apply_mapping(reading, root, "", where);
  }
  return reading;
}

}  // namespace

namespace {

// A file or a command-line value is read whole or refused: a second document ("---") would
// otherwise be dropped unread. `what` is what must be one document ("a config", "a value").
YAML::Node single_document(const std::vector<YAML::Node>& documents, const std::string& where,
                           const std::string& what = "a config") {
  if (documents.size() > 1)
    throw ConfigError(fmt::format("{}: holds {} YAML documents (separated by '---'); {} is one document", where,
                                  documents.size(), what));
  return documents.empty() ? YAML::Node() : documents.front();
}

// A command-line value is read as YAML (for lists and quoting), and YAML may read another text than
// the one typed: ' #...' is a comment, a line break folds to a space, a leading tag or anchor is
// dropped. For a string key (a folder, a checkpoint) that silently names another path, e.g. the
// folder of another run, which the run would then resume. Such a value is refused, showing what YAML
// made of it; quoting keeps the text. Spaces around the value are not part of it.
void check_string_read_as_typed(const Field& field, const YAML::Node& value, const std::string& text,
                                const std::string& where) {
  if (field.type != "string" || !value.IsScalar()) return;
  const auto first = text.find_first_not_of(" \t");
  const auto last = text.find_last_not_of(" \t");
  const std::string typed = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  const bool quoted =
      typed.size() >= 2 && (typed.front() == '\'' || typed.front() == '"') && typed.back() == typed.front();
  if (quoted || value.Scalar() == typed) return;
  throw ConfigError(
      fmt::format("{}: key '{}' would read as '{}', not the text given (YAML drops a ' #' comment "
                  "and a leading tag or anchor, and folds line breaks): quote the value in YAML to keep it",
                  where, field.key, value.Scalar()));
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": is a folder, not a config file");
  YAML::Node root;
  try {
    root = single_document(YAML::LoadAllFromFile(path), path);
  } catch (const ConfigError&) {
    throw;
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
  Reading reading = apply_root(root, path);
  std::map<std::string, std::string> given;  // key -> the override that set it
  for (const auto& item : overrides) {
    const auto eq = item.find('=');
    const std::string where = "command-line override '" + item + "'";
    if (eq == std::string::npos || eq == 0) throw ConfigError(where + ": expected key=value");
    const std::string key = item.substr(0, eq);
    const Field* field = find_field(key);
    if (!field) throw ConfigError(unknown_key_message(where, key));
    // As in a file: of two values, which one was meant is not for the program to guess.
    if (const auto [before, fresh] = given.emplace(key, item); !fresh)
      throw ConfigError(where + ": key '" + key + "' is given twice on the command line (also '" + before->second +
                        "')");
    YAML::Node value;
    try {
      value = single_document(YAML::LoadAll(item.substr(eq + 1)), where + ": key '" + key + "'", "a value");
    } catch (const ConfigError&) {
      throw;
    } catch (const YAML::Exception& e) {
      throw ConfigError(where + ": value is not valid YAML: " + e.what());
    }
    check_string_read_as_typed(*field, value, item.substr(eq + 1), where);
    assign(reading, *field, value, where);
  }
  validate(reading, overrides.empty() ? path : path + " (with overrides)");
  return reading.config;
}

namespace {

// Keys added after runs had been saved, whose default is not what those runs computed. A saved
// config without one was written before the key existed and ran the value here, so that a resume
// sees the difference (and refuses it, naming the key) instead of switching silently.
struct ValueBeforeTheKey {
  const char* key;
  const char* value;
};
constexpr ValueBeforeTheKey kValuesBeforeTheKeys[] = {
    {"data.transforms", "tensor"},  // the views' ops before the PIL-equal ones became the default
    {"optim.lr_update", "step"},    // the learning rate was set every step before main_moco.py's per epoch
};

bool holds_key(const YAML::Node& node, const std::string& dotted) {
  if (!node.IsMap()) return false;
  const auto dot = dotted.find('.');
  const YAML::Node child = node[dotted.substr(0, dot)];  // const: the lookup adds nothing
  return child.IsDefined() && (dot == std::string::npos || holds_key(child, dotted.substr(dot + 1)));
}

}  // namespace

Config load_config_text(const std::string& yaml, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(where + ": not valid YAML: " + e.what());
  }
  Reading reading = apply_root(root, where);
  for (const auto& before : kValuesBeforeTheKeys) {
    if (!holds_key(root, before.key)) assign(reading, *find_field(before.key), YAML::Node(before.value), where);
  }
  validate(reading, where);
  return reading.config;
}

namespace {

bool changes_math(const std::string& key, Job job) {
  static const std::set<std::string> free_in_math_sections{"data.workers", "data.prefetch", "lincls.epochs",
                                                           "lincls.save_every_epochs"};
  if (free_in_math_sections.count(key)) return false;
  const std::string section = key.substr(0, key.find('.'));
  if (key == "train.seed" || section == "data") return true;
  if (job == Job::kLincls) return section == "model" || section == "lincls";
  // The online probe's state is in the checkpoint only when it was on, and its lr shapes that state.
  if (key == "eval.online_probe" || key == "eval.probe_lr") return true;
  return (section == "model" && key != "model.pretrained") || section == "moco" || section == "v3" ||
         section == "optim";
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

}  // namespace moco::run
