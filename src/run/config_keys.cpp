#include "run/config_keys.h"

#include "data/augment_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>
#include <variant>

namespace moco::run {
namespace {

// The names an enum-valued key takes.
template <typename E>
struct Choices {
  std::vector<std::pair<E, const char*>> names;
};

const Choices<Arch>& choices(Arch) {
  static const Choices<Arch> c{{{Arch::kResnetTiny, "resnet_tiny"},
                                {Arch::kResnet18, "resnet18"},
                                {Arch::kResnet34, "resnet34"},
                                {Arch::kResnet50, "resnet50"},
                                {Arch::kVitTinyCpu, "vit_tiny_cpu"},
                                {Arch::kVitSmall, "vit_small"},
                                {Arch::kVitBase, "vit_base"}}};
  return c;
}
const Choices<Dataset>& choices(Dataset) {
  static const Choices<Dataset> c{{{Dataset::kFashionMnist, "fashion_mnist"},
                                   {Dataset::kMnist, "mnist"},
                                   {Dataset::kSynthetic, "synthetic"},
                                   {Dataset::kImageFolder, "imagefolder"},
                                   {Dataset::kHdf5, "hdf5"}}};
  return c;
}
const Choices<data::Recipe>& choices(data::Recipe) {
  using data::Recipe;
  static const Choices<Recipe> c{{{Recipe::kSimple, data::recipe_name(Recipe::kSimple)},
                                  {Recipe::kV1, data::recipe_name(Recipe::kV1)},
                                  {Recipe::kV2, data::recipe_name(Recipe::kV2)},
                                  {Recipe::kV3, data::recipe_name(Recipe::kV3)}}};
  return c;
}
const Choices<data::Transforms>& choices(data::Transforms) {
  using data::Transforms;
  static const Choices<Transforms> c{{{Transforms::kPil, "pil"}, {Transforms::kTensor, "tensor"}}};
  return c;
}
const Choices<Schedule>& choices(Schedule) {
  static const Choices<Schedule> c{{{Schedule::kStep, "step"}, {Schedule::kCosine, "cosine"}}};
  return c;
}
const Choices<LrUpdate>& choices(LrUpdate) {
  static const Choices<LrUpdate> c{{{LrUpdate::kEpoch, "epoch"}, {LrUpdate::kStep, "step"}}};
  return c;
}
const Choices<Precision>& choices(Precision) {
  static const Choices<Precision> c{
      {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}}};
  return c;
}

const Choices<Optimizer>& choices(Optimizer) {
  static const Choices<Optimizer> c{
      {{Optimizer::kSgd, "sgd"}, {Optimizer::kLars, "lars"}, {Optimizer::kAdamw, "adamw"}}};
  return c;
}

// How an error lists a key's names: "step or cosine"; "one of a, b, c, d, e" past four.
template <typename E>
std::string allowed(const Choices<E>& c) {
  const size_t n = c.names.size();
  std::string text = n > 4 ? "one of " : "";
  for (size_t i = 0; i < n; ++i)
    text += std::string(i == 0 ? "" : i + 1 == n && n <= 4 ? " or " : ", ") + c.names[i].second;
  return text;
}

template <typename E>
const Choices<E>& choices_of() {
  return choices(E{});
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
      throw BadChoice{fmt::format("must be {}, not '{}'", allowed(choices(T{})), name)};
    } else {
      const T value = node.as<T>();
      if constexpr (std::is_same_v<T, double>)
        if (!std::isfinite(value)) throw NotFinite{};
      return value;
    }
  }
}

// The shared keys' own rules (with rules::positive, non_negative, at_least_one, in_closed, in_range).
// Bounds of the model's sizes: far above any recipe's (width 1-4, dim 128-256).
constexpr double kMostWidth = 64;
constexpr int64_t kMostDim = 1 << 16;
using rules::at_least_one;
using rules::non_negative;
using rules::positive;
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
Rule<double> in_open_closed(double lo, double hi) { return lies_in(lo, hi, true, false); }
Rule<double> in_closed_open(double lo, double hi) { return lies_in(lo, hi, false, true); }

// MOCO_FIELD(model.dim, help): the row of the key that is the member's path. (The augmentation's keys
// are rows of data/augment_params.h, the table augment_batch checks its options against, read as rows below.)
#define MOCO_FIELD(path, help)                                        \
  ConfigRow::of<std::decay_t<decltype(std::declval<Config>().path)>>( \
      #path, help, [](Config & c) -> auto& { return c.path; })

std::vector<ConfigRow> model_rows() {
  return {
      // Its help and rule are the program's methods' (KeyTable).
      MOCO_FIELD(model.method, ""),
      MOCO_FIELD(model.arch,
                 "encoder: resnet_tiny (~1.3M parameters with the MLP head), resnet18, resnet34, resnet50, "
                 "vit_small, vit_base (MoCo v3's ViT-S/16, ViT-B/16) or vit_tiny_cpu (patch 4, dim 64, 4 blocks of "
                 "4 heads, for 28-32 px images); a ViT is built for data.image_size"),
      MOCO_FIELD(model.small_stem, "3x3 stride-1 first conv and no max-pool, for 28-32 px images"),
      MOCO_FIELD(
          model.stem_stride,
          "stride of the small stem's conv: 2 halves every feature map (about 4x fewer FLOPs, for speed on CPUs)")
          .must(one_or_two),
      MOCO_FIELD(model.width, "width multiplier of every stage; 0 keeps the architecture's own")
          .must(rules::in_closed(0, kMostWidth)),
      MOCO_FIELD(model.zero_init_residual,
                 "ResNet: each residual branch's last BatchNorm starts with weight 0, so each block starts as the "
                 "identity (torchvision's zero_init_residual; MoCo v3's main_moco.py sets it, v1/v2's does not)"),
      MOCO_FIELD(model.activation_checkpointing,
                 "each ViT block or ResNet stage keeps only its input for backward and runs again there (less "
                 "memory, one more forward of the backbone; the gradients bit for bit those without it, BatchNorm's "
                 "running statistics moved once)"),
      MOCO_FIELD(model.dim, "dimension of queries and keys").must(rules::in_range(1, kMostDim)),
      MOCO_FIELD(
          model.pretrained,
          "the backbone moco_lincls and moco_dist --eval-only evaluate: a checkpoint folder, a checkpoints/ folder or "
          "a run's output_dir (its latest), a `moco_ckpt export` .h5 file, random (MoCo's initialisation from "
          "train.seed) or raw_pixels (the normalised pixels, no network); training ignores it"),
  };
}

// A row of data/augment_params.h (the augmentation's keys) as a row bound to its AugmentOptions
// member, checked by the table's own range.
ConfigRow augment_row(const data::AugmentParam& param) {
  return std::visit(
      [&param](auto member) -> ConfigRow {
        using T = std::decay_t<decltype(std::declval<data::AugmentOptions>().*member)>;
        return ConfigRow::of<T>(param.key, param.help, [member](Config& c) -> T& { return c.data.augment.*member; })
            .must([param, member](const T& value) {
              data::AugmentOptions options;
              options.*member = value;
              return data::range_error(param, options);
            });
      },
      param.member);
}

void add_augment_rows(std::vector<ConfigRow>& rows, data::ParamGroup group) {
  for (const auto& param : data::augment_params())
    if (param.group == group) rows.push_back(augment_row(param));
}

// The dataset's keys, the augmentation's pipeline (its table's rows), the loader's, the ops' parameters.
std::vector<ConfigRow> data_rows() {
  std::vector<ConfigRow> rows = {
      MOCO_FIELD(data.dataset,
                 "fashion_mnist, mnist (IDX files under data.root), synthetic, imagefolder "
                 "(data.root/<split>/<class>/<image>.{jpg,jpeg,png}, RGB, classes sorted as torchvision; needs "
                 "a data.augmentation other than simple), or hdf5 (an ImageFolder packed by moco_pack: "
                 "data.root/<split>-SSSSS-of-NNNNN.h5, the same samples in the same order; as imagefolder otherwise)"),
      MOCO_FIELD(data.root, "folder of the IDX files, or of the ImageFolder splits"),
      MOCO_FIELD(data.train_dir,
                 "imagefolder: the train split's folder under data.root; hdf5: its shards' prefix "
                 "(data.root/<train_dir>-*.h5)"),
      MOCO_FIELD(data.val_dir,
                 "imagefolder: the val split's folder under data.root, hdf5: its shards' prefix (the kNN monitor's "
                 "queries; its evaluation view is Resize(S*256/224) + CenterCrop(S), S = data.image_size)"),
  };
  add_augment_rows(rows, data::ParamGroup::kPipeline);
  std::vector<ConfigRow> loader = {
      MOCO_FIELD(data.workers,
                 "decode/augmentation threads per rank; 0: on CUDA the rank's cores but one (its share of the node's, "
                 "or those it is bound to), on CPU 1")
          .must(thread_count),
      MOCO_FIELD(data.prefetch, "batches prepared ahead of training").must(at_least_one),
      MOCO_FIELD(data.synthetic_train_size, "images in the synthetic train split"),
      MOCO_FIELD(data.synthetic_test_size, "images in the synthetic test split"),
      MOCO_FIELD(data.synthetic_channels, "channels of synthetic images").must(at_least_one),
  };
  std::move(loader.begin(), loader.end(), std::back_inserter(rows));
  add_augment_rows(rows, data::ParamGroup::kOps);
  return rows;
}

std::vector<ConfigRow> optim_train_rows() {
  return {
      MOCO_FIELD(optim.base_lr, "learning rate for a batch of 256; scaled linearly with the batch").must(positive),
      MOCO_FIELD(optim.batch_size, "images per step (the global batch)").must(positive),
      MOCO_FIELD(optim.micro_batch,
                 "0: each rank's share of optim.batch_size in one piece; > 0: in pieces of this many images (a "
                 "divisor of the share; lr, schedules and epochs unchanged), for less memory. v3 (ViT): the whole "
                 "batch's step up to fp32 rounding, one more backbone forward per piece; v1/v2: BatchNorm and "
                 "shuffle-BN per piece, as a smaller batch per rank, the queue filled once per step")
          .must(non_negative),
      MOCO_FIELD(optim.optimizer,
                 "sgd (SGD with momentum), lars (momentum SGD whose update of each weight matrix "
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
      MOCO_FIELD(train.resume_on_changed_data,
                 "resume although the train split is not the one the checkpoint was trained on (another count of "
                 "images, or another file, size or label: each checkpoint keeps the split's fingerprint); what changed "
                 "is logged. false: such a resume is refused (exit 2), naming the change"),
      MOCO_FIELD(train.stop_at_step,
                 "if > 0, end the run after this step with a checkpoint, the lr schedule still spanning train.epochs "
                 "(jobs sliced into time windows)")
          .must(non_negative),
      MOCO_FIELD(
          train.tensorboard,
          "also write the metrics (loss, lr, img/s, acc@1/5, data wait, kNN) as TensorBoard events in output_dir/tb"),
      MOCO_FIELD(train.max_bad_steps,
                 "a step whose queries, keys, loss or gradients hold NaN or Inf on any rank is skipped by every rank "
                 "(parameters, optimizer state, key/momentum encoder, every BatchNorm statistic, queue unchanged; "
                 "MoCo v1, v2 and v3); this many in a row stop the run with an error; 0: stop at the first. With "
                 "train.precision fp16 an Inf or NaN gradient alone is the loss scale's to skip, not a bad step")
          .must(non_negative),
      MOCO_FIELD(
          train.precision,
          "fp32; bf16: the encoders' forward and backward run under autocast in bfloat16 (on CUDA, and on CPUs "
          "LibTorch supports); fp16 (CUDA only; moco-v3's main_moco.py's torch.cuda.amp): autocast in float16 with "
          "a dynamic loss scale as torch's GradScaler (2^16 at first, halved and the optimizer's step skipped on an "
          "Inf or NaN gradient, doubled after 2000 good steps; checkpointed as scaler/*). The loss, the logits, "
          "the queue, the momentum update and the optimizer stay in fp32"),
      MOCO_FIELD(train.channels_last,
                 "keep images and convolution weights in channels-last (NHWC) memory order, faster for convolutions on "
                 "tensor cores"),
      MOCO_FIELD(train.cudnn_benchmark,
                 "on CUDA: let cuDNN time its convolution algorithms on the first batches and keep the fastest (the "
                 "shapes do not change during a run)"),
  };
}

std::vector<ConfigRow> ckpt_dist_debug_rows() {
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
      MOCO_FIELD(debug.check_step_syncs,
                 "a call that makes the host wait for the device inside a training step, up to its reports (log "
                 "steps, checkpoints, epoch ends), is an error naming the op (CUDA: any such call; every device: "
                 "the trainer's counted host reads); not with a method's checks that read inside the step"),
  };
}

std::vector<ConfigRow> knn_lincls_rows() {
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

// A row as the reader, the writer and the checks use it; `method`: the room whose row it is, or "".
Field field_of(const ConfigRow& row, const std::string& method) {
  return std::visit(
      [&](const auto& binding) {
        using T = std::decay_t<decltype(binding.member(std::declval<Config&>()))>;
        Field f{row.key, type_name<T>(), row.help, nullptr, nullptr, nullptr, method, row.resume_must_match};
        auto access = binding.member;
        f.set = [access](Config& c, const YAML::Node& node) { access(c) = read_value<T>(node); };
        f.get = [access](const Config& c) { return to_node(access(const_cast<Config&>(c))); };
        if (binding.rule)
          f.check = [access, rule = binding.rule](const Config& c) { return rule(access(const_cast<Config&>(c))); };
        return f;
      },
      row.binding);
}

// The keys every method shares, in the order to_yaml writes them and --help lists them.
std::vector<Field> shared_fields() {
  std::vector<Field> list;
  for (auto section : {&model_rows, &data_rows, &optim_train_rows, &ckpt_dist_debug_rows, &knn_lincls_rows})
    for (const auto& row : section()) list.push_back(field_of(row, ""));
  return list;
}
#undef MOCO_FIELD

// model.method's help: each method's name and what its room says of it.
std::string method_help(const Methods& methods) {
  std::string help;
  for (const auto& room : methods) help += (help.empty() ? "" : "; ") + room.name + ": " + room.about;
  return help;
}

// What each method takes of a shared key's choices (MethodRoom::accepts): ". model.method a trains x or
// y; b trains any".
template <typename E>
std::string accepted_help(const Methods& methods, std::vector<E> Accepts::*choices, const char* verb) {
  std::string help;
  for (const auto& room : methods) {
    const auto& accepted = room.accepts.*choices;
    const bool any = accepted.size() == choices_of<E>().names.size();
    help += fmt::format("{}{} {} {}", help.empty() ? ". model.method " : "; ", room.name, verb,
                        any ? "any" : choice_list(accepted));
  }
  return help;
}

// Inserts the methods' rows after the shared keys their rooms name (in the rooms' order, each room's
// rows in its own order); a key twice or an unknown place is the program's mistake.
void add_method_fields(std::vector<Field>& fields, const Methods& methods) {
  for (const auto& room : methods) {
    for (const auto& row : room.keys) {
      const auto taken = std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == row.key; });
      if (taken != fields.end()) throw std::logic_error("config key " + row.key + " declared twice");
      auto place =
          std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return f.key == row.listed_after; });
      if (place == fields.end())
        throw std::logic_error("config key " + row.key + ": no shared key " + row.listed_after + " to list it after");
      // After the anchor and the method rows already placed behind it.
      ++place;
      while (place != fields.end() && !place->method.empty()) ++place;
      fields.insert(place, field_of(row, room.name));
    }
  }
}

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

}  // namespace

std::string method_choice(const Methods& methods, const std::string& name) {
  std::string names;
  for (size_t i = 0; i < methods.size(); ++i) {
    if (methods[i].name == name) return "";
    names += (i == 0 ? "" : i + 1 == methods.size() ? " or " : ", ") + methods[i].name;
  }
  return fmt::format("must be {}, not '{}'", names, name);
}

KeyTable::KeyTable(const Methods* methods) : fields_(shared_fields()) {
  if (!methods) return;
  for (auto& f : fields_) {
    if (f.key == "model.method") {
      f.help = method_help(*methods);
      f.check = [methods](const Config& c) { return method_choice(*methods, c.model.method); };
    }
    if (f.key == "model.arch") f.help += accepted_help(*methods, &Accepts::archs, "trains");
    if (f.key == "optim.optimizer") f.help += accepted_help(*methods, &Accepts::optimizers, "trains with");
    if (f.key == "train.precision") f.help += accepted_help(*methods, &Accepts::precisions, "trains in");
  }
  add_method_fields(fields_, *methods);
}

std::vector<const Field*> KeyTable::of_method(const std::string& method) const {
  std::vector<const Field*> rows;
  for (const auto& f : fields_)
    if (f.method.empty() || f.method == method) rows.push_back(&f);
  return rows;
}

const Field* KeyTable::find(const std::string& key) const {
  for (const auto& f : fields_)
    if (f.key == key) return &f;
  return nullptr;
}

bool KeyTable::is_section(const std::string& key) const {
  for (const auto& f : fields_)
    if (f.key.rfind(key + ".", 0) == 0) return true;
  return false;
}

std::string KeyTable::unknown_key_message(const std::string& where, const std::string& key) const {
  std::string best;
  size_t best_distance = 4;  // suggest only near misses
  for (const auto& f : fields_) {
    const size_t d = edit_distance(key, f.key);
    if (d < best_distance) best_distance = d, best = f.key;
  }
  std::string msg = where + ": unknown key '" + key + "'";
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  return msg + "; 'moco_dist --help' lists every key";
}

namespace rules {
Rule<double> in_closed(double lo, double hi) { return lies_in(lo, hi, false, false); }
Rule<int64_t> in_range(int64_t lo, int64_t hi) {
  return [=](const int64_t& v) {
    return v >= lo && v <= hi ? "" : fmt::format("must lie in [{}, {}], not {}", lo, hi, v);
  };
}
}  // namespace rules

const char* to_string(Arch arch) { return name_of(arch); }
const char* to_string(Dataset dataset) { return name_of(dataset); }
const char* to_string(Schedule schedule) { return name_of(schedule); }
const char* to_string(LrUpdate update) { return name_of(update); }
const char* to_string(Precision precision) { return name_of(precision); }
const char* to_string(Optimizer optimizer) { return name_of(optimizer); }

}  // namespace moco::run
