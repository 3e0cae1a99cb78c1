// defines: Config (every setting of a run: the keys every method shares, and the settings of the method
// model.method names, whose keys its room declares: run/method_room.h), fmt formatters of its
// enum-valued keys (run/config_choices.h), load_config (YAML file + dotted key=value overrides),
// config_reference (the key list --help prints), ConfigError
#pragma once

#include "data/augment_options.h"
#include "run/config_choices.h"
#include "run/method_room.h"

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::run {

// A bad file, key or value. The message names the file and the key; the CLI exits 2 on it.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Fashion-MNIST's pixel statistics as the normalisation; every other augmentation default is AugmentOptions'.
data::AugmentOptions default_augment_options();

struct Config {
  struct Model {
    std::string method;  // a room of the program's Methods; empty (a config built by hand): the first
    Arch arch = Arch::kResnetTiny;
    bool small_stem = true;                 // 3x3 stride-1 stem, no max-pool (small images)
    int64_t stem_stride = 1;                // stride of the small stem's conv
    double width = 0;                       // 0: the architecture's own
    bool zero_init_residual = false;        // a ResNet's residual branches' last BN weight starts at 0
    bool activation_checkpointing = false;  // ViT blocks, ResNet stages keep only their input and run again in backward
    int64_t dim = 128;                      // output (key/query) dimension
    // The backbone that moco_lincls and moco_dist --eval-only evaluate: a checkpoint (folder, its
    // checkpoints/ or the run's output_dir), a `moco_ckpt export` file, "random" or "raw_pixels".
    std::string pretrained;
  } model;
  struct Data {
    Dataset dataset = Dataset::kFashionMnist;
    std::string root = "/usr/share/datasets/fashion-mnist";
    std::string train_dir = "train", val_dir = "val";  // imagefolder: the splits under root; hdf5: the shards' prefixes
    int workers = 0;
    int prefetch = 2;
    int64_t synthetic_train_size = 2048, synthetic_test_size = 512, synthetic_channels = 1;
    // data.augmentation, data.image_size (out_size), data.crop_scale_min (scale_min), the other
    // strengths, data.mean/std and data.dct_scaling: the keys bind to these members (config.cpp).
    data::AugmentOptions augment = default_augment_options();
  } data;
  struct Optim {
    double base_lr = 0.03;  // lr = base_lr * batch_size / 256
    int64_t batch_size = 256;
    // > 0: each rank's share of batch_size runs in pieces of this many images, the step still the
    // whole batch's (a method that accepts it: MethodRoom::accepts.micro_batch); 0: one piece.
    int64_t micro_batch = 0;
    Optimizer optimizer = Optimizer::kSgd;
    double momentum = 0.9;
    double weight_decay = 1e-4;
    double warmup_epochs = 0;  // linear from 0 to the peak lr, then the schedule
    Schedule schedule = Schedule::kStep;
    std::vector<double> milestones{120, 160};  // epochs, for step
    double gamma = 0.1;
    LrUpdate lr_update = LrUpdate::kEpoch;  // epoch: set at each epoch's start, as main_moco.py
  } optim;
  struct Train {
    double epochs = 200;       // may be fractional
    double time_budget_s = 0;  // > 0: stop after this much training time, schedule follows it
    uint64_t seed = 0;
    int64_t log_every = 50;  // steps
    std::string output_dir = "runs/default";
    int threads = 0;              // intra-op threads; 0: the cores this process may use
    std::string resume = "auto";  // auto | never | path to a checkpoint folder
    int64_t stop_at_step = 0;     // > 0: end (with a checkpoint) after this step; the schedule still spans epochs
    bool tensorboard = true;      // also write metrics as TensorBoard events in output_dir/tb
    int64_t max_bad_steps =
        5;  // consecutive steps with NaN/Inf queries skipped before the run stops; 0: stop at the first
    Precision precision = Precision::kFp32;  // bf16, fp16 (a loss scale, CUDA only): autocast around the encoders
    bool channels_last = false;              // NHWC images and convolution weights
    bool cudnn_benchmark = true;  // on CUDA: cuDNN picks the fastest convolution algorithms for the shapes seen
    // Resume although the train split differs from the checkpoint's (the change is logged).
    bool resume_on_changed_data = false;
  } train;
  struct Ckpt {
    int64_t every_steps = 0;    // 0: off
    double every_minutes = 30;  // of training time; 0: off
    int64_t keep_last = 3;
    int64_t keep_every_steps = 0;  // > 0: checkpoints at multiples of this are never deleted
    bool async = true;             // write in the background; the loop waits only for a host copy
  } ckpt;
  struct Dist {
    double bucket_mb = 25;            // gradient all-reduce bucket size
    double first_bucket_mb = 1;       // the first bucket, small so communication starts early
    bool check_collectives = true;    // verify shapes/dtypes agree across ranks before each collective
    double timeout_s = 300;           // a collective not done by then is an error, not a hang
    bool log_all_ranks = false;       // every rank logs to the console, not only rank 0
    bool world_group_at_one = false;  // a world of one runs world N's collectives through MPI (NCCL on CUDA)
  } dist;
  struct Debug {
    bool anomaly_detection = false;  // autograd anomaly mode: a NaN/Inf in backward names its op
    bool check_step_syncs = false;   // CUDA: a step that makes the host wait for the device is an error
  } debug;
  struct Knn {
    int64_t k = 200;
    double temperature = 0.1;
    int64_t every_epochs = 0;  // 0: only before and after training
    int64_t batch_size = 512;
    int64_t memory_size = 0;        // train samples in the memory bank; 0: the whole train split
    int64_t query_size = 0;         // test samples scored; 0: the whole test split
    std::string subset = "spread";  // which samples a cap takes: spread (evenly over the split) | first
    std::string raw_baseline =
        "auto";  // also score the raw normalised pixels: auto (images up to 64 px) | true | false
  } knn;
  struct Eval {
    bool online_probe = false;       // a linear classifier on the detached query features, trained alongside
    double probe_lr = 0.1;           // its SGD lr (momentum 0.9, no weight decay), constant
    int64_t probe_val_size = 10000;  // test images it is scored on at each epoch's end; 0: the whole split
  } eval;
  struct Lincls {  // the linear protocol (moco_lincls); defaults are the official main_lincls.py's
    int64_t epochs = 100;
    double base_lr = 30;       // for a batch of 256, scaled linearly with lincls.batch_size
    int64_t batch_size = 256;  // global
    double momentum = 0.9;
    double weight_decay = 0;
    Schedule schedule = Schedule::kStep;     // MoCo v3's main_lincls.py: cosine
    std::vector<double> milestones{60, 80};  // epochs at which the lr is multiplied by gamma
    double gamma = 0.1;
    double crop_scale_min = 0.08;   // RandomResizedCrop of the training view
    bool cached_features = false;   // train on the features of the un-augmented images, extracted once
    bool standardize = false;       // features shifted and scaled per dimension by the train split's mean and std
    int64_t save_every_epochs = 1;  // 0: a checkpoint only at the end (and when stopped)
  } lincls;
  // The values of the methods' own keys (each room reads its own settings from here).
  MethodSettings method_settings;
  // The program's methods this config was read with (load_config); null for a config built by hand.
  std::shared_ptr<const Methods> methods;
};

// Which program a config drives: MoCo pre-training (moco_dist) or the linear protocol (moco_lincls).
// It decides which keys change the computation (a checkpoint resumes only if those are unchanged)
// and which batch the ranks share.
enum class Job { kMoco, kLincls };

// The global batch the job splits over its ranks (optim.batch_size or lincls.batch_size) and its key.
int64_t global_batch(const Config& config, Job job);
const char* global_batch_key(Job job);

// Channels of the configured dataset's images, known from the config alone (the IDX sets are greyscale).
int64_t dataset_channels(const Config& config);

// imagefolder and hdf5: JPEG/PNG files of any size, decoded per sample (RGB, augmentation v1/v2).
bool is_encoded_dataset(const Config& config);

// Reads the YAML file, applies overrides ("optim.base_lr=0.06", values in YAML syntax), validates.
// The keys are the shared ones and those of the methods' rooms; a key of a method other than the one
// model.method names is refused, naming both. Unknown keys, wrong types and out-of-range values throw
// ConfigError naming the file and the key. The config keeps `methods`.
Config load_config(std::shared_ptr<const Methods> methods, const std::string& path,
                   const std::vector<std::string>& overrides = {});

// What only the launched job knows: the job's global batch must split evenly over world_size ranks;
// what a rank holds through a step (step_memory) must fit its memory (run::memory_limit).
// Throws ConfigError naming `where` (the config file) and the key.
void validate_for_world(const Config& config, int world_size, const std::string& where, Job job = Job::kMoco);

// What a rank holds through a step, estimated before anything is built: its batch of views, and the
// method's MethodRoom::memory_plan (MoCo) or the frozen encoder (the linear protocol).
std::vector<MemoryPart> step_memory(const Config& config, int world_size, Job job = Job::kMoco);

// The same from YAML text (a checkpoint's saved config); `where` names its origin in errors. A key
// added since the config was saved, whose default differs from what the run computed then
// (data.transforms, optim.lr_update), reads as that older value; keys of another method than the
// saved model.method (every saved config held all of them before the methods had rooms) are dropped.
Config load_config_text(std::shared_ptr<const Methods> methods, const std::string& yaml, const std::string& where);

// The effective configuration as YAML (written beside the run's metrics): the shared keys and those
// of its method.
std::string to_yaml(const Config& config);

// A key whose value differs between two configs. changes_math: the run would compute something else.
// For MoCo: model (but model.pretrained), optim, data other than loader threads, train.seed, the
// online probe, and the method's keys its room marks so. For the linear protocol: model, data other
// than loader threads, lincls but its length and checkpoint cadence, train.seed. The rest (logging,
// kNN, checkpoints, dist, length of the run) may change when a run resumes.
struct ConfigChange {
  std::string key, before, after;
  bool changes_math = false;
};
std::vector<ConfigChange> config_changes(const Config& before, const Config& after, Job job = Job::kMoco);

// One line per key, the methods' among the shared: name, type, default, meaning.
std::string config_reference(const Methods& methods);

// The keys of the config's method in a section, and their values: " <section>.<key>=<value>..." (empty
// when none).
std::string method_keys_text(const Config& config, const std::string& section);

// The room of config.model.method (config.methods must be set).
const MethodRoom& method_room(const Config& config);

}  // namespace moco::run

// fmt::format("{}", config.model.arch) prints the name, as when the keys were strings.
template <typename E>
struct moco_config_enum_formatter : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(E value, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(moco::run::to_string(value), ctx);
  }
};
template <>
struct fmt::formatter<moco::run::Arch> : moco_config_enum_formatter<moco::run::Arch> {};
template <>
struct fmt::formatter<moco::run::Dataset> : moco_config_enum_formatter<moco::run::Dataset> {};
template <>
struct fmt::formatter<moco::run::Schedule> : moco_config_enum_formatter<moco::run::Schedule> {};
template <>
struct fmt::formatter<moco::run::LrUpdate> : moco_config_enum_formatter<moco::run::LrUpdate> {};
template <>
struct fmt::formatter<moco::run::Precision> : moco_config_enum_formatter<moco::run::Precision> {};
template <>
struct fmt::formatter<moco::run::Optimizer> : moco_config_enum_formatter<moco::run::Optimizer> {};
