#include "data/augment_params.h"
#include "moco_v2/v2_settings.h"
#include "moco_v3/v3_settings.h"
#include "app/methods.h"
#include "run/config.h"
#include "run/setup.h"
#include "model/resnet.h"
#include "train/schedule.h"
#include "thrown_message.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

using moco::run::Config;
using moco::run::ConfigError;

namespace {

// As moco_dist reads a config: with the programs' methods.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {}) {
  return moco::run::load_config(moco::app::methods(), path, overrides);
}

const std::string kConfigs = std::string(MOCO_TEST_DATA_DIR) + "/../../configs/";

std::string write_temp(const std::string& text) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("moco_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".yaml");
  std::ofstream(path) << text;
  return path.string();
}

std::string config_error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(path, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(ConfigTest, ShippedConfigsLoad) {
  for (const char* name : {"fashion_mnist_quick.yaml", "moco_v1_r50_imagenet.yaml", "moco_v2_r50_imagenet.yaml"}) {
    EXPECT_NO_THROW(load_config(kConfigs + name)) << name;
  }
  const auto v1 = load_config(kConfigs + "moco_v1_r50_imagenet.yaml");
  EXPECT_EQ(v1.model.arch, moco::run::Arch::kResnet50);
  EXPECT_DOUBLE_EQ(moco::moco_v2::settings(v1).temperature, 0.07);
  EXPECT_EQ(v1.optim.milestones, (std::vector<double>{120, 160}));
  const auto v2 = load_config(kConfigs + "moco_v2_r50_imagenet.yaml");
  EXPECT_TRUE(moco::moco_v2::settings(v2).mlp);
  EXPECT_DOUBLE_EQ(moco::moco_v2::settings(v2).temperature, 0.2);
  EXPECT_EQ(v2.optim.schedule, moco::run::Schedule::kCosine);
  // The papers' augmentations: v1 jitter 0.4 everywhere (hue too), always; v2 aug+ with hue 0.1 and blur.
  EXPECT_EQ(v1.data.dataset, moco::run::Dataset::kImageFolder);
  EXPECT_EQ(v1.data.augment.recipe, moco::data::Recipe::kV1);
  EXPECT_DOUBLE_EQ(v1.data.augment.hue, 0.4);
  EXPECT_EQ(v2.data.augment.recipe, moco::data::Recipe::kV2);
  EXPECT_DOUBLE_EQ(v2.data.augment.hue, 0.1);
  EXPECT_DOUBLE_EQ(v2.data.augment.jitter_prob, 0.8);
  EXPECT_DOUBLE_EQ(v2.data.augment.blur_prob, 0.5);
  EXPECT_EQ(v2.data.augment.blur_sigma, (std::vector<double>{0.1, 2.0}));
  // What configs from before the new keys get: the batched recipe of the small sets.
  EXPECT_EQ(load_config(kConfigs + "fashion_mnist_quick.yaml").data.augment.recipe, moco::data::Recipe::kSimple);
}

TEST(ConfigTest, AugmentationKeysAreChecked) {
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  augmentation: v4\n")), "data.augmentation"));
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  augmentation: v2\n  hue: 0.6\n")), "data.hue"));
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  augmentation: v2\n  blur_sigma: [2.0, 0.1]\n")),
                       "data.blur_sigma"));
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  dataset: imagefolder\n  mean: [0.5]\n  std: [0.5]\n")),
                       "data.augmentation"));
  // ImageFolder images are RGB: 3 values or 1, known from the config alone.
  EXPECT_TRUE(contains(
      config_error_of(
          write_temp("data:\n  dataset: imagefolder\n  augmentation: v2\n  mean: [0.5, 0.5]\n  std: [0.5, 0.5]\n")),
      "has 2 values but data.dataset imagefolder has 3 channel(s)"));
  // Packed shards (moco_pack) are the same RGB images of any size: the same rules.
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  dataset: hdf5\n  mean: [0.5]\n  std: [0.5]\n")),
                       "data.augmentation"));
  EXPECT_TRUE(contains(config_error_of(write_temp(
                           "data:\n  dataset: hdf5\n  augmentation: v2\n  mean: [0.5, 0.5]\n  std: [0.5, 0.5]\n")),
                       "has 2 values but data.dataset hdf5 has 3 channel(s)"));
  EXPECT_EQ(
      load_config(write_temp("data:\n  dataset: hdf5\n  augmentation: v2\n  mean: [0.5]\n  std: [0.5]\n")).data.dataset,
      moco::run::Dataset::kHdf5);
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  dataset: hdf6\n")),
                       "must be one of fashion_mnist, mnist, synthetic, imagefolder, hdf5"));
}

// The enum-valued keys: read as names, printed as names, and a name they do not know is reported
// when the config is validated, naming the key and the allowed values, so an override can still fix it.
TEST(ConfigTest, EnumKeysReadAndPrintTheirNames) {
  const auto c = load_config(write_temp("{}\n"), {"model.arch=resnet34", "data.dataset=synthetic",
                                                  "optim.schedule=cosine", "train.precision=bf16"});
  EXPECT_EQ(c.model.arch, moco::run::Arch::kResnet34);
  EXPECT_EQ(c.data.dataset, moco::run::Dataset::kSynthetic);
  EXPECT_EQ(c.optim.schedule, moco::run::Schedule::kCosine);
  EXPECT_EQ(c.train.precision, moco::run::Precision::kBf16);
  EXPECT_EQ(fmt::format("{} {} {} {}", c.model.arch, c.data.dataset, c.optim.schedule, c.train.precision),
            "resnet34 synthetic cosine bf16");
  const std::string yaml = moco::run::to_yaml(c);
  EXPECT_TRUE(contains(yaml, "  arch: resnet34\n") && contains(yaml, "  precision: bf16\n")) << yaml;
  EXPECT_TRUE(
      contains(moco::run::config_reference(*moco::app::methods()), "  model.arch (string, default resnet_tiny)\n"));

  const auto bad = write_temp("model:\n  arch: resnet99\n");
  EXPECT_EQ(config_error_of(bad, {"train.seed=1"}),
            bad +
                " (with overrides): key 'model.arch' must be one of resnet_tiny, resnet18, resnet34, resnet50, "
                "vit_tiny_cpu, vit_small, vit_base, not 'resnet99'");
  EXPECT_EQ(load_config(bad, {"model.arch=resnet18"}).model.arch, moco::run::Arch::kResnet18);  // the override wins
  EXPECT_TRUE(contains(config_error_of(bad, {"model.arch=resnet7"}), "not 'resnet7'"));
  EXPECT_TRUE(contains(config_error_of(write_temp("optim:\n  schedule: linear\n")),
                       "key 'optim.schedule' must be step or cosine, not 'linear'"));
  EXPECT_TRUE(contains(config_error_of(write_temp("train:\n  precision: fp8\n")),
                       "key 'train.precision' must be fp32, bf16 or fp16, not 'fp8'"));
  EXPECT_TRUE(contains(config_error_of(write_temp("data:\n  augmentation: v4\n")),
                       "key 'data.augmentation' must be simple, v1, v2 or v3, not 'v4'"));
  EXPECT_TRUE(contains(config_error_of(write_temp("model:\n  arch: [resnet18]\n")),
                       "key 'model.arch' expects string, got a list"));
}

// Each key's range is checked from its row, with the message validate always gave.
TEST(ConfigTest, RangesAreCheckedFromTheRows) {
  const auto path = write_temp("{}\n");
  EXPECT_TRUE(contains(config_error_of(path, {"data.flip_prob=1.5"}), "key 'data.flip_prob' must lie in [0, 1]"));
  EXPECT_TRUE(
      contains(config_error_of(path, {"data.crop_scale_min=0"}), "key 'data.crop_scale_min' must lie in (0, 1]"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.brightness=1"}), "key 'data.brightness' must lie in [0, 1)"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.hue=0.6"}), "key 'data.hue' must lie in [0, 0.5]"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.image_size=0"}), "key 'data.image_size' must lie in [1, 65536]"));
  EXPECT_TRUE(contains(config_error_of(path, {"ckpt.keep_last=0"}), "key 'ckpt.keep_last' must be at least 1"));
  EXPECT_TRUE(contains(config_error_of(path, {"train.threads=-1"}),
                       "key 'train.threads' must be 0 (from the cores) or a thread count up to 1024, not -1"));
  EXPECT_TRUE(contains(config_error_of(path, {"knn.raw_baseline=maybe"}),
                       "key 'knn.raw_baseline' must be auto, true or false, not 'maybe'"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.blur_sigma=[0.1]"}),
                       "key 'data.blur_sigma' must be [min, max] with 0 < min <= max"));
  EXPECT_NO_THROW(load_config(path, {"data.flip_prob=1", "data.crop_scale_min=1", "data.hue=0.5", "data.brightness=0",
                                     "moco.momentum=0"}));  // edges inside
}

// The augmentation's keys are the rows of its table (data/augment_params.h), each with its help.
TEST(ConfigTest, AugmentationKeysComeFromTheirTable) {
  const std::string reference = moco::run::config_reference(*moco::app::methods());
  for (const auto& param : moco::data::augment_params()) {
    EXPECT_TRUE(contains(reference, "\n  " + std::string(param.key) + " (")) << param.key;
    EXPECT_TRUE(contains(reference, std::string(")\n      ") + param.help + "\n")) << param.key;
  }
}

// The invariant checks read on the host inside the step, which debug.check_step_syncs makes an error.
TEST(ConfigTest, CheckInvariantsWithCheckStepSyncsIsRefusedNamingBoth) {
  const auto path = write_temp("{}\n");
  const auto error = config_error_of(path, {"debug.check_invariants=true", "debug.check_step_syncs=true"});
  EXPECT_TRUE(contains(error, "key 'debug.check_invariants'")) << error;
  EXPECT_TRUE(contains(error, "debug.check_step_syncs")) << error;
  EXPECT_NO_THROW(load_config(path, {"debug.check_invariants=true"}));
  EXPECT_NO_THROW(load_config(path, {"debug.check_step_syncs=true"}));
}

// The data.* augmentation keys feed the options the loader uses, member for member.
TEST(ConfigTest, AugmentationKeysBindTheAugmentOptions) {
  const auto c = load_config(write_temp("{}\n"),
                             {"data.augmentation=v2", "data.image_size=20", "data.crop_scale_min=0.3",
                              "data.blur_sigma=[0.2, 1.5]", "data.dct_scaling=false", "data.transforms=tensor"});
  const moco::data::AugmentOptions& a = c.data.augment;
  EXPECT_EQ(a.recipe, moco::data::Recipe::kV2);
  EXPECT_EQ(a.out_size, 20);
  EXPECT_DOUBLE_EQ(a.scale_min, 0.3);
  EXPECT_EQ(a.blur_sigma, (std::vector<double>{0.2, 1.5}));
  EXPECT_FALSE(a.dct_scaling);
  EXPECT_EQ(a.transforms, moco::data::Transforms::kTensor);
  // v3's per-view probabilities: the first view's beside v2's blur key, the second's of their own.
  const auto v3 =
      load_config(write_temp("{}\n"), {"data.augmentation=v3", "data.blur_prob=0.9", "data.key_blur_prob=0.3",
                                       "data.solarize_prob=0.05", "data.key_solarize_prob=0.4"})
          .data.augment;
  EXPECT_EQ(v3.recipe, moco::data::Recipe::kV3);
  EXPECT_DOUBLE_EQ(v3.blur_prob, 0.9);
  EXPECT_DOUBLE_EQ(v3.key_blur_prob, 0.3);
  EXPECT_DOUBLE_EQ(v3.solarize_prob, 0.05);
  EXPECT_DOUBLE_EQ(v3.key_solarize_prob, 0.4);
  EXPECT_TRUE(contains(config_error_of(write_temp("{}\n"), {"data.key_solarize_prob=1.2"}),
                       "key 'data.key_solarize_prob' must lie in [0, 1]"));
  // The official scripts' PIL transforms unless a config says otherwise.
  EXPECT_EQ(load_config(write_temp("{}\n")).data.augment.transforms, moco::data::Transforms::kPil);
  EXPECT_TRUE(contains(config_error_of(write_temp("{}\n"), {"data.transforms=pillow"}),
                       "key 'data.transforms' must be pil or tensor, not 'pillow'"));
  EXPECT_EQ(Config().data.augment.mean, (std::vector<double>{0.2860}));  // Fashion-MNIST's statistics by default
}

TEST(ConfigTest, UnknownKeyNamesTheKeyAndTheFile) {
  const auto path = write_temp("optim:\n  base_lr: 0.1\n  bach_size: 64\n");
  const auto message = config_error_of(path);
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(contains(message, "optim.bach_size")) << message;
  EXPECT_TRUE(contains(message, "did you mean 'optim.batch_size'")) << message;
  EXPECT_TRUE(contains(config_error_of(write_temp("modle:\n  arch: resnet18\n")), "'modle'"));
}

TEST(ConfigTest, BadTypeNamesTheKeyAndTheValue) {
  const auto message = config_error_of(write_temp("optim:\n  batch_size: lots\n"));
  EXPECT_TRUE(contains(message, "optim.batch_size")) << message;
  EXPECT_TRUE(contains(message, "'lots'")) << message;
  EXPECT_TRUE(contains(config_error_of(write_temp("optim:\n  batch_size: 1.5\n")), "expects int"));
  EXPECT_TRUE(contains(config_error_of(write_temp("model: resnet18\n")), "'model' is a section"));
  EXPECT_TRUE(contains(config_error_of(write_temp("model:\n  mlp: maybe\n")), "expects bool"));
}

TEST(ConfigTest, OverridesReachNestedKeysAndWinOverTheFile) {
  const auto path = write_temp("optim:\n  base_lr: 0.1\n  milestones: [5, 8]\n");
  const auto c =
      load_config(path, {"optim.base_lr=0.5", "moco.queue_size=1000", "optim.milestones=[1, 2, 3]", "model.mlp=true"});
  EXPECT_DOUBLE_EQ(c.optim.base_lr, 0.5);
  EXPECT_EQ(moco::moco_v2::settings(c).queue_size, 1000);
  EXPECT_EQ(c.optim.milestones, (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(moco::moco_v2::settings(c).mlp);
  EXPECT_EQ(c.optim.batch_size, Config{}.optim.batch_size);  // untouched keys keep defaults
}

TEST(ConfigTest, BadOverridesAreErrors) {
  const auto path = write_temp("{}\n");
  EXPECT_TRUE(contains(config_error_of(path, {"optim.lr=0.5"}), "unknown key 'optim.lr'"));
  EXPECT_TRUE(contains(config_error_of(path, {"optim.base_lr"}), "expected key=value"));
  EXPECT_TRUE(contains(config_error_of(path, {"moco.momentum=1.5"}), "moco.momentum"));
  EXPECT_TRUE(contains(config_error_of(path, {"optim.batch_size=512", "moco.queue_size=100"}), "moco.queue_size"));
}

TEST(ConfigTest, MissingOrBrokenFileIsAnError) {
  EXPECT_TRUE(contains(config_error_of("/nonexistent/x.yaml"), "/nonexistent/x.yaml"));
  EXPECT_TRUE(contains(config_error_of(write_temp("model: [\n")), "not valid YAML"));
}

TEST(ConfigTest, AFolderOrAnEmptyFileIsAnError) {
  const std::string folder = std::filesystem::temp_directory_path().string();
  EXPECT_TRUE(contains(config_error_of(folder), folder + ": is a folder, not a config file"))
      << config_error_of(folder);
  const auto empty = write_temp("");
  EXPECT_TRUE(contains(config_error_of(empty), empty + ": the config file is empty")) << config_error_of(empty);
  EXPECT_TRUE(contains(config_error_of(write_temp("# nothing but a comment\n")), "is empty"));
  EXPECT_NO_THROW(load_config(write_temp("{}\n")));  // every default, said explicitly
}

TEST(ConfigTest, AnEmptyValueIsAnErrorNamingTheKey) {
  const auto path = write_temp("{}\n");
  EXPECT_TRUE(contains(config_error_of(path, {"model.arch="}),
                       "command-line override 'model.arch=': key 'model.arch' has no value (expects string)"))
      << config_error_of(path, {"model.arch="});
  EXPECT_TRUE(contains(config_error_of(path, {"optim.milestones="}), "key 'optim.milestones' has no value"));
  const auto file = write_temp("model:\n  arch:\n");
  EXPECT_TRUE(contains(config_error_of(file), file + ": key 'model.arch' has no value")) << config_error_of(file);
  EXPECT_TRUE(contains(config_error_of(path, {"model.arch=''"}), "must be one of"));  // an empty string is a value
}

// A value on the command line is one YAML document, as a config file is: read with its second
// document dropped, "optim.milestones=[120]\n---\n[160]" would run with [120] and say nothing.
TEST(ConfigTest, AMultiDocumentValueIsRefusedNamingTheKey) {
  const auto path = write_temp("{}\n");
  const auto error = config_error_of(path, {"optim.milestones=[120]\n---\n[160]"});
  EXPECT_TRUE(contains(error,
                       "key 'optim.milestones': holds 2 YAML documents (separated by '---'); a value is one "
                       "document"))
      << error;
  EXPECT_NO_THROW(load_config(path, {"optim.milestones=[120, 160]"}));
  EXPECT_NO_THROW(load_config(path, {"train.output_dir=a---b"}));  // not a separator
}

TEST(ConfigTest, ARepeatedKeyIsAnErrorNamingTheKeyAndLines) {
  const auto path = write_temp("optim:\n  base_lr: 0.1\n  batch_size: 64\n  base_lr: 0.2\n");
  EXPECT_TRUE(contains(config_error_of(path), path + ": key 'optim.base_lr' is given twice (lines 2 and 4)"))
      << config_error_of(path);
  const auto sections = write_temp("model: {arch: resnet18}\noptim: {base_lr: 0.1}\nmodel: {mlp: true}\n");
  EXPECT_TRUE(contains(config_error_of(sections), "key 'model' is given twice (lines 1 and 3)"))
      << config_error_of(sections);
  EXPECT_TRUE(contains(config_error_of(write_temp("model: {dim: 64, dim: 32}\n")), "key 'model.dim' is given twice"));
  // On the command line too: the last one used to win without a word.
  const auto twice = config_error_of(write_temp("{}\n"), {"model.dim=64", "train.seed=1", "model.dim=32"});
  EXPECT_TRUE(contains(twice,
                       "command-line override 'model.dim=32': key 'model.dim' is given twice on the command "
                       "line (also 'model.dim=64')"))
      << twice;
}

TEST(ConfigTest, NegativeMilestonesAreRefused) {
  const auto path = write_temp("{}\n");
  for (const std::string key : {"optim.milestones", "lincls.milestones"}) {
    const auto error = config_error_of(path, {key + "=[-1, 5]"});
    EXPECT_TRUE(contains(error, "key '" + key + "' holds -1: milestones are epochs, at least 0")) << error;
  }
  EXPECT_NO_THROW(load_config(path, {"optim.milestones=[0, 5]"}));
}

TEST(ConfigTest, MeanAndStdMatchTheDatasetsChannels) {
  const auto path = write_temp("{}\n");
  // The IDX sets are greyscale: one value (or one per channel, the same thing).
  const auto rgb_on_mnist = config_error_of(path, {"data.mean=[0.1, 0.2, 0.3]", "data.std=[1, 2, 3]"});
  EXPECT_TRUE(contains(rgb_on_mnist, "key 'data.mean' has 3 values but data.dataset fashion_mnist has 1 channel(s)"))
      << rgb_on_mnist;
  EXPECT_TRUE(contains(config_error_of(path, {"data.dataset=mnist", "data.std=[1, 2]", "data.mean=[0, 0]"}),
                       "key 'data.mean'"));
  // Synthetic images have data.synthetic_channels.
  EXPECT_NO_THROW(load_config(path, {"data.dataset=synthetic", "data.synthetic_channels=3", "data.mean=[0.1, 0.2, 0.3]",
                                     "data.std=[1, 2, 3]"}));
  EXPECT_NO_THROW(
      load_config(path, {"data.dataset=synthetic", "data.synthetic_channels=3", "data.mean=0.5", "data.std=0.2"}));
  const auto two_of_three = config_error_of(
      path, {"data.dataset=synthetic", "data.synthetic_channels=3", "data.mean=[0.1, 0.2]", "data.std=[1, 2]"});
  EXPECT_TRUE(
      contains(two_of_three,
               "key 'data.mean' has 2 values but data.dataset synthetic has 3 channel(s) (data.synthetic_channels)"))
      << two_of_three;
}

TEST(ConfigTest, TheBatchMustSplitOverTheRanks) {
  Config c;
  c.optim.batch_size = 33;
  EXPECT_NO_THROW(moco::run::validate_for_world(c, 1, "f.yaml"));
  EXPECT_NO_THROW(moco::run::validate_for_world(c, 3, "f.yaml"));
  try {
    moco::run::validate_for_world(c, 2, "f.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "f.yaml: key 'optim.batch_size' (33) must be divisible by the number of ranks (2)"))
        << e.what();
  }
}

TEST(ConfigTest, EffectiveConfigRoundTrips) {
  const auto c = load_config(write_temp("{}\n"), {"train.seed=7", "data.dataset=synthetic", "data.synthetic_channels=3",
                                                  "data.mean=[0.1, 0.2, 0.3]", "data.std=[1, 2, 3]"});
  const auto again = load_config(write_temp(moco::run::to_yaml(c)));
  EXPECT_EQ(again.train.seed, 7u);
  EXPECT_EQ(again.data.augment.mean, (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_EQ(moco::run::to_yaml(again), moco::run::to_yaml(c));
  EXPECT_TRUE(contains(moco::run::config_reference(*moco::app::methods()), "moco.queue_size (int, default 65536)"));
}

// A thread count no machine has is a typo, refused before any thread starts: 100000 intra-op
// threads held a 2-core host for minutes before the first step.
TEST(ConfigTest, ThreadCountsBeyondAnyMachineAreRefusedNamingTheKey) {
  const auto path = write_temp("{}\n");
  for (const std::string key : {"train.threads", "data.workers"}) {
    EXPECT_EQ(config_error_of(path, {key + "=1024"}), "") << key;
    EXPECT_EQ(config_error_of(path, {key + "=100000"}),
              path + " (with overrides): key '" + key +
                  "' must be 0 (from the cores) or a thread count up to 1024, not 100000");
  }
}

// A command-line value YAML would read as another text is refused: 'runs/a #2' (a comment), a line
// break (folded to a space), a tag or an anchor silently named another run's folder, which the run
// then resumed. Quoted, the text is kept; spaces around it are not part of it; other types are
// read as YAML reads them.
TEST(ConfigTest, AnOverrideStringReadAsAnotherTextIsRefused) {
  const auto path = write_temp("{}\n");
  const auto refused = [&](const std::string& item, const std::string& read_as) {
    const auto error = config_error_of(path, {item});
    EXPECT_EQ(error, "command-line override '" + item + "': key 'train.output_dir' would read as '" + read_as +
                         "', not the text given (YAML drops a ' #' comment and a leading tag or anchor, and folds "
                         "line breaks): quote the value in YAML to keep it")
        << item;
  };
  refused("train.output_dir=runs/a #2", "runs/a");
  refused("train.output_dir=runs/a\nb", "runs/a b");
  refused("train.output_dir=!tag runs/a", "runs/a");
  refused("train.output_dir=&anchor runs/a", "runs/a");
  EXPECT_TRUE(contains(config_error_of(path, {"model.pretrained=runs/x #old"}),
                       "key 'model.pretrained' would read as 'runs/x'"));
  for (const std::string kept : {"runs/a#2", "runs/a b", "runs/ü日本", "runs/a\tb"})
    EXPECT_EQ(load_config(path, {"train.output_dir=" + kept}).train.output_dir, kept) << kept;
  EXPECT_EQ(load_config(path, {"train.output_dir='runs/a #2'"}).train.output_dir, "runs/a #2");
  EXPECT_EQ(load_config(path, {"train.output_dir=\"runs/a\\nb\""}).train.output_dir, "runs/a\nb");
  EXPECT_EQ(load_config(path, {"train.output_dir= runs/a "}).train.output_dir, "runs/a");
  EXPECT_EQ(load_config(path, {"optim.base_lr=0.5 # the lr"}).optim.base_lr, 0.5);
}

// .nan and .inf are YAML floats, but no key means anything by them, and to_yaml writes them as "nan"
// and "inf", which do not read back: a checkpoint of such a run could not be resumed (found by
// fuzz/fuzz_config.cpp's round trip). They are refused when the config loads, naming the key.
TEST(ConfigTest, NonFiniteFloatsAreRefusedNamingTheKey) {
  const auto path = write_temp("{}\n");
  EXPECT_TRUE(contains(config_error_of(path, {"train.time_budget_s=.inf"}),
                       "key 'train.time_budget_s' expects a finite float, got '.inf'"))
      << config_error_of(path, {"train.time_budget_s=.inf"});
  EXPECT_TRUE(contains(config_error_of(path, {"train.epochs=.inf"}), "key 'train.epochs' expects a finite float"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.mean=[.nan]"}), "key 'data.mean' expects a finite list of float"));
  EXPECT_TRUE(contains(config_error_of(path, {"data.mean=.nan"}),
                       "key 'data.mean' expects a finite list of float, got '.nan'"));
  const auto file = write_temp("optim:\n  milestones: [10, .inf]\n");
  EXPECT_TRUE(contains(config_error_of(file), file + ": key 'optim.milestones' expects a finite list of float"))
      << config_error_of(file);
}

// What a checkpoint does with a config: to_yaml, then load_config_text. Extreme finite floats
// (the largest, the smallest normal, a denormal, negative zero) come back the same.
TEST(ConfigTest, ExtremeFiniteFloatsSurviveTheCheckpointRoundTrip) {
  const auto c = load_config(write_temp("{}\n"),
                             {"train.time_budget_s=1.7976931348623157e308", "data.std=[2.2250738585072014e-308]",
                              "moco.momentum=-0.0", "dist.bucket_mb=4.9e-324"});
  const auto again = moco::run::load_config_text(moco::app::methods(), moco::run::to_yaml(c), "saved");
  EXPECT_TRUE(moco::run::config_changes(c, again).empty()) << moco::run::to_yaml(c);
}

// A checkpoint saved before data.transforms and optim.lr_update existed ran the tensor ops and set
// the learning rate every step: its config reads so, and a resume with today's defaults is refused
// naming both keys, instead of switching the views and the schedule silently.
TEST(ConfigTest, SavedConfigWithoutALaterKeyReadsTheValueItRanBeforeTheKeyExisted) {
  using moco::data::Transforms;
  using moco::run::LrUpdate;
  const Config before_the_keys = moco::run::load_config_text(moco::app::methods(), "{}\n", "old checkpoint");
  EXPECT_EQ(before_the_keys.data.augment.transforms, Transforms::kTensor);
  EXPECT_EQ(before_the_keys.optim.lr_update, LrUpdate::kStep);
  std::set<std::string> math;
  for (const auto& change : moco::run::config_changes(before_the_keys, load_config(write_temp("{}\n"))))
    if (change.changes_math) math.insert(change.key);
  EXPECT_EQ(math, (std::set<std::string>{"data.transforms", "optim.lr_update"}));
  // Their sections present, the keys absent: the same.
  const Config sections =
      moco::run::load_config_text(moco::app::methods(), "data: {dataset: synthetic}\noptim: {base_lr: 0.1}\n", "old");
  EXPECT_EQ(sections.data.augment.transforms, Transforms::kTensor);
  EXPECT_EQ(sections.optim.lr_update, LrUpdate::kStep);

  // Saved today, both keys are written: they read back as they were, defaults included.
  const Config now = moco::run::load_config_text(moco::app::methods(), moco::run::to_yaml(Config{}), "new checkpoint");
  EXPECT_EQ(now.data.augment.transforms, Transforms::kPil);
  EXPECT_EQ(now.optim.lr_update, LrUpdate::kEpoch);
  // Given in a section of their own, they are read, not replaced.
  const Config given = moco::run::load_config_text(moco::app::methods(),
                                                   "data: {transforms: pil}\noptim: {lr_update: epoch}\n", "given");
  EXPECT_EQ(given.data.augment.transforms, Transforms::kPil);
  EXPECT_EQ(given.optim.lr_update, LrUpdate::kEpoch);
}

// A method's keys are its room's (issue 49): given to a config of another method they are refused
// naming the key and both methods, from the file or the command line (issue 50, case 10); a
// checkpoint's saved config of before the rooms, which held every method's keys, drops the others'.
TEST(ConfigTest, AKeyOfAnotherMethodIsRefusedNamingBothMethods) {
  const auto v2_file = write_temp("moco: {temperature: 0.2}\n");
  const auto error = config_error_of(v2_file, {"model.method=v3"});
  EXPECT_TRUE(contains(error, v2_file + ": key 'moco.temperature' is read by model.method v2 only, and this "
                                        "config's model.method is v3"))
      << error;
  const auto from_override = config_error_of(write_temp("{}\n"), {"v3.mlp_dim=64"});
  EXPECT_TRUE(contains(from_override,
                       "command-line override 'v3.mlp_dim=64': key 'v3.mlp_dim' is read by model.method "
                       "v3 only, and this config's model.method is v2"))
      << from_override;
  EXPECT_NO_THROW(load_config(write_temp("{}\n"), {"model.method=v3", "v3.mlp_dim=64"}));

  const Config saved = moco::run::load_config_text(
      moco::app::methods(), "model: {method: v3, mlp: false}\nmoco: {queue_size: 256}\nv3: {mlp_dim: 64}\n", "saved");
  EXPECT_EQ(moco::moco_v3::settings(saved).mlp_dim, 64);
  const std::string yaml = moco::run::to_yaml(saved);
  EXPECT_FALSE(contains(yaml, "queue_size")) << yaml;
  EXPECT_FALSE(contains(yaml, "mlp:")) << yaml;
  EXPECT_TRUE(contains(yaml, "mlp_dim: 64")) << yaml;
}

// Whether a resume must find a key unchanged is said by its row: a method's keys change MoCo's math
// (debug.check_invariants does not), and no key of a method changes the linear protocol's.
TEST(ConfigTest, AMethodsKeysChangeTheMathOfItsRunsOnly) {
  const auto path = write_temp("{}\n");
  const auto a = load_config(path);
  const auto b = load_config(path, {"moco.temperature=0.2", "debug.check_invariants=true"});
  std::map<std::string, bool> moco, lincls;
  for (const auto& change : moco::run::config_changes(a, b, moco::run::Job::kMoco))
    moco[change.key] = change.changes_math;
  for (const auto& change : moco::run::config_changes(a, b, moco::run::Job::kLincls))
    lincls[change.key] = change.changes_math;
  EXPECT_EQ(moco, (std::map<std::string, bool>{{"debug.check_invariants", false}, {"moco.temperature", true}}));
  EXPECT_EQ(lincls, (std::map<std::string, bool>{{"debug.check_invariants", false}, {"moco.temperature", false}}));
  // Another method: model.method says it all.
  const auto v3 = load_config(path, {"model.method=v3"});
  std::set<std::string> keys;
  for (const auto& change : moco::run::config_changes(a, v3)) keys.insert(change.key);
  EXPECT_EQ(keys, std::set<std::string>{"model.method"});
}

// --help lists every method's keys where its room places them: model.mlp after model.dim, MoCo
// v1/v2's moco.* then v3's v3.* after model.pretrained, debug.check_invariants after
// debug.anomaly_detection; model.method's line names each method.
TEST(ConfigTest, HelpListsEachMethodsKeysWhereItsRoomPlacesThem) {
  const std::string reference = moco::run::config_reference(*moco::app::methods());
  const auto at = [&](const std::string& key) { return reference.find("  " + key + " ("); };
  ASSERT_NE(at("moco.queue_size"), std::string::npos);
  EXPECT_LT(at("model.dim"), at("model.mlp"));
  EXPECT_LT(at("model.mlp"), at("model.pretrained"));
  EXPECT_LT(at("model.pretrained"), at("moco.queue_size"));
  EXPECT_LT(at("moco.bn_splits"), at("v3.mlp_dim"));
  EXPECT_LT(at("v3.stop_grad_conv1"), at("data.dataset"));
  EXPECT_LT(at("debug.anomaly_detection"), at("debug.check_invariants"));
  EXPECT_LT(at("debug.check_invariants"), at("debug.check_step_syncs"));
  EXPECT_TRUE(contains(reference, "model.method (string, default v2)\n      v2: MoCo v1/v2 with the queue"))
      << reference;
  EXPECT_TRUE(contains(reference, "; v3: MoCo v3 (projector and predictor")) << reference;
}

// What a method trains with is its room's data (MethodRoom::accepts), checked and put in --help by the
// shared keys: a made-up method taking resnet18 with sgd in fp32 refuses the rest, naming itself.
TEST(ConfigTest, AMethodsAcceptedChoicesAreItsRoomsData) {
  moco::run::MethodRoom room;
  room.name = "plain";
  room.about = "a made-up method";
  room.accepts = {{moco::run::Arch::kResnet18}, {moco::run::Optimizer::kSgd}, {moco::run::Precision::kFp32}};
  const auto methods = std::make_shared<const moco::run::Methods>(moco::run::Methods{room});
  const auto path = write_temp("model: {arch: resnet18}\n");
  EXPECT_NO_THROW(moco::run::load_config(methods, path, {}));
  const std::pair<const char*, const char*> refusals[] = {
      {"model.arch=resnet50", ": key 'model.arch' resnet50: model.method plain trains resnet18"},
      {"optim.optimizer=lars", ": key 'optim.optimizer' lars: model.method plain trains with sgd"},
      {"train.precision=bf16", ": key 'train.precision' bf16: model.method plain trains in fp32"}};
  for (const auto& [override_, message] : refusals) {
    const auto error = moco::test::error_of([&] { moco::run::load_config(methods, path, {override_}); });
    EXPECT_TRUE(contains(error, message)) << override_ << ": " << error;
  }
  const std::string help = moco::run::config_reference(*methods);
  for (const char* said : {"for data.image_size. model.method plain trains resnet18\n",
                           "on every parameter). model.method plain trains with sgd\n",
                           "stay in fp32. model.method plain trains in fp32\n"})
    EXPECT_TRUE(contains(help, said)) << said << " not in:\n" << help;
  // The programs' methods: each as its room lists.
  const auto v2_vit = config_error_of(write_temp("{}\n"), {"model.arch=vit_tiny_cpu"});
  EXPECT_TRUE(contains(v2_vit,
                       "key 'model.arch' vit_tiny_cpu: model.method v2 trains resnet_tiny, resnet18, "
                       "resnet34 or resnet50"))
      << v2_vit;
  EXPECT_NO_THROW(load_config(write_temp("{}\n"), {"model.method=v3", "model.arch=vit_tiny_cpu",
                                                   "optim.optimizer=adamw", "data.image_size=32"}));
}

// model.zero_init_residual reaches the ResNet every program builds (run::backbone_options): each
// residual branch's last BatchNorm weight starts at 0 (ResNetTest pins which, against torchvision);
// a ViT, which has none, refuses the key.
TEST(ConfigTest, ZeroInitResidualReachesTheResNetAndIsRefusedForAViT) {
  const auto path = write_temp("{}\n");
  for (const bool on : {false, true}) {
    const auto c =
        load_config(path, {"model.arch=resnet18", "model.zero_init_residual=" + std::string(on ? "true" : "false")});
    moco::model::ResNet net(moco::run::backbone_options(c, 1));
    int64_t zeroed = 0;
    for (const auto& p : net->named_parameters())
      if (p.key().find(".bn2.weight") != std::string::npos && p.value().abs().sum().item<double>() == 0) ++zeroed;
    EXPECT_EQ(zeroed, on ? 8 : 0) << "resnet18 has 8 basic blocks";
  }
  const auto error =
      config_error_of(path, {"model.method=v3", "model.arch=vit_tiny_cpu", "model.zero_init_residual=true"});
  EXPECT_TRUE(contains(error, "key 'model.zero_init_residual' applies to a ResNet's residual blocks")) << error;
}

TEST(ScheduleTest, LinearScalingStepAndCosine) {
  Config c;
  c.optim.base_lr = 0.03;
  c.optim.batch_size = 512;
  c.optim.milestones = {120, 160};
  c.train.epochs = 200;
  EXPECT_DOUBLE_EQ(moco::train::learning_rate(c, 0), 0.06);
  EXPECT_DOUBLE_EQ(moco::train::learning_rate(c, 119.9), 0.06);
  EXPECT_NEAR(moco::train::learning_rate(c, 120), 0.006, 1e-12);
  EXPECT_NEAR(moco::train::learning_rate(c, 199), 0.0006, 1e-12);
  c.optim.schedule = moco::run::Schedule::kCosine;
  EXPECT_DOUBLE_EQ(moco::train::learning_rate(c, 0), 0.06);
  EXPECT_NEAR(moco::train::learning_rate(c, 100), 0.03, 1e-12);
  EXPECT_NEAR(moco::train::learning_rate(c, 200), 0.0, 1e-12);
}

// main_moco.py's adjust_learning_rate(optimizer, epoch, args) at each epoch's start, epoch an integer:
// lr = args.lr x 0.5 (1 + cos(pi epoch / epochs)) with --cos, else x 0.1 per milestone <= epoch.
namespace schedule_test {
double main_moco_lr(double lr, int64_t epoch, int64_t epochs, bool cos, const std::vector<double>& milestones) {
  if (cos) return lr * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(epochs)));
  for (double m : milestones) lr *= static_cast<double>(epoch) >= m ? 0.1 : 1.0;
  return lr;
}
}  // namespace schedule_test

TEST(ScheduleTest, EpochUpdateIsMainMocoPysIntegerEpochAndStepUpdateTheFraction) {
  Config c;  // optim.lr_update=epoch by default
  c.train.epochs = 10;
  c.optim.milestones = {3, 7};
  const int64_t steps_per_epoch = 7, total = 70;
  for (const bool cos : {false, true}) {
    c.optim.schedule = cos ? moco::run::Schedule::kCosine : moco::run::Schedule::kStep;
    for (int64_t step = 0; step < total; ++step) {
      const int64_t epoch = step / steps_per_epoch;
      const double progress = static_cast<double>(step) / static_cast<double>(total);
      c.optim.lr_update = moco::run::LrUpdate::kEpoch;
      const double lr = moco::train::learning_rate(
          c, moco::train::schedule_epoch(moco::train::pretraining_schedule(c), epoch, progress));
      EXPECT_NEAR(lr, schedule_test::main_moco_lr(0.03, epoch, 10, cos, c.optim.milestones), 1e-15)
          << "step " << step << " cos " << cos;
      c.optim.lr_update = moco::run::LrUpdate::kStep;
      EXPECT_DOUBLE_EQ(moco::train::schedule_epoch(moco::train::pretraining_schedule(c), epoch, progress),
                       progress * 10)
          << "step " << step;
    }
  }
  // Under a time budget the budget's whole epochs lead when they are ahead of the loop's.
  c.optim.lr_update = moco::run::LrUpdate::kEpoch;
  c.train.time_budget_s = 100;
  EXPECT_EQ(moco::train::schedule_epoch(moco::train::pretraining_schedule(c), 0, 0.0999), 0);
  EXPECT_EQ(moco::train::schedule_epoch(moco::train::pretraining_schedule(c), 0, 0.1), 1);
  EXPECT_EQ(moco::train::schedule_epoch(moco::train::pretraining_schedule(c), 0, 0.75), 7);
  EXPECT_EQ(moco::train::schedule_epoch(moco::train::pretraining_schedule(c), 4, 0.25),
            4);  // steps ahead of the clock: the loop's epoch
}
