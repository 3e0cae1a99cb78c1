#include "run/setup.h"

#include "data/file_list_cache.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "data/image_shards.h"
#include "data/synthetic.h"
#include "sys/paths.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

namespace moco::run {
namespace {

// A split of encoded images, found once per process (check_data looks before any work, load_splits
// then reuses it: a million-file walk is not repeated): an ImageFolder's file list, also kept across
// processes by the file-list cache (beside the split, or in train.output_dir if that exists already
// and the data's folder is read-only: file_list_cache.h), or packed shards, opened. A missing or
// empty folder, or shards that are missing or do not belong together, are the config's fault:
// ConfigError naming `where`, the keys and the folder.
std::shared_ptr<const data::EncodedSource> encoded_split(const Config& c, const std::string& dir, const char* key,
                                                         const std::string& where, bool write_file_list = true,
                                                         bool file_list_in_output_dir = true) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const data::EncodedSource>> found;
  const std::string id =
      std::string(to_string(c.data.dataset)) + ":" + (std::filesystem::path(c.data.root) / dir).string();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = found.find(id); it != found.end()) return it->second;
  try {
    std::shared_ptr<const data::EncodedSource> source;
    if (c.data.dataset == Dataset::kHdf5)
      source = std::make_shared<data::ImageShardSource>(c.data.root, dir);
    else
      source = std::make_shared<data::ImageFolderSource>(
          data::scan_image_folder_cached((std::filesystem::path(c.data.root) / dir).string(), {c.train.output_dir},
                                         write_file_list, file_list_in_output_dir)
              .folder);
    return found.emplace(id, std::move(source)).first->second;
  } catch (const data::FolderError& e) {
    throw ConfigError(where + ": keys 'data.root' and '" + key + "': " + e.what());
  }
}

// A run's folder inside a split folder it reads is taken for a class folder without images by every
// later scan, which refuses the data: the run's own resume included. Found before the scan.
void check_output_outside_splits(const Config& c, const std::string& where) {
  if (c.data.dataset != Dataset::kImageFolder) return;
  for (const auto& [dir, key] : {std::pair<std::string, const char*>{c.data.train_dir, "data.train_dir"},
                                 std::pair<std::string, const char*>{c.data.val_dir, "data.val_dir"}}) {
    const std::string split = (std::filesystem::path(c.data.root) / dir).string();
    if (sys::lies_within(c.train.output_dir, split))
      throw ConfigError(where + ": keys 'train.output_dir' and '" + key + "': " + c.train.output_dir +
                        " lies inside the split folder " + split +
                        " the run reads: every later scan would take it for a class folder without images and "
                        "refuse the data (this run's resume too); write it elsewhere");
  }
}

}  // namespace

namespace {

// The classes of `a` that `b` lacks, at most a few of them by name: "cat, dog" or "cat, dog and 7 more".
std::string classes_missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::set<std::string> in_b(b.begin(), b.end());
  std::vector<std::string> missing;
  for (const auto& name : a)
    if (!in_b.count(name)) missing.push_back(name);
  constexpr size_t kShown = 5;
  std::string text;
  for (size_t i = 0; i < std::min(missing.size(), kShown); ++i) text += (i ? ", " : "") + missing[i];
  if (missing.size() > kShown) text += " and " + std::to_string(missing.size() - kShown) + " more";
  return text.empty() ? "none" : text;
}

}  // namespace

void check_data(const Config& c, const std::string& where, bool write_file_list, bool file_list_in_output_dir) {
  // data.root's default is Fashion-MNIST's folder, and MNIST's IDX files read alike: data.dataset=mnist
  // without a data.root of its own trained and evaluated on Fashion-MNIST without a word.
  if (c.data.dataset == Dataset::kMnist && c.data.root == Config{}.data.root)
    throw ConfigError(where + ": key 'data.root' is " + c.data.root +
                      ", Fashion-MNIST's folder (the default), but data.dataset is mnist, whose IDX files read "
                      "alike: give MNIST's folder as data.root");
  if (!is_encoded_dataset(c)) return;
  check_output_outside_splits(c, where);
  const auto train =
      encoded_split(c, c.data.train_dir, "data.train_dir", where, write_file_list, file_list_in_output_dir);
  const auto val = encoded_split(c, c.data.val_dir, "data.val_dir", where, write_file_list, file_list_in_output_dir);
  if (val->classes() != train->classes())
    throw ConfigError(
        where + ": key 'data.val_dir': " + val->root() + " holds " + std::to_string(val->classes().size()) +
        (c.data.dataset == Dataset::kImageFolder ? " class folders" : " classes") + ", not the " +
        std::to_string(train->classes().size()) + " of " + train->root() +
        " (the kNN monitor needs the same classes); only in val: " + classes_missing(val->classes(), train->classes()) +
        "; only in train: " + classes_missing(train->classes(), val->classes()));
}

Splits load_splits(const Config& c) {
  if (c.data.dataset == Dataset::kSynthetic) {
    const int64_t side = c.data.augment.out_size;
    // One task: the test split holds the samples after the train split's, of the same classes.
    return {std::make_shared<data::SyntheticDataset>(c.data.synthetic_train_size, c.data.synthetic_channels, side, side,
                                                     10, c.train.seed),
            std::make_shared<data::SyntheticDataset>(c.data.synthetic_test_size, c.data.synthetic_channels, side, side,
                                                     10, c.train.seed, c.data.synthetic_train_size)};
  }
  if (is_encoded_dataset(c)) {
    auto split = [&](const std::string& dir, const char* key) {
      return std::make_shared<data::EncodedImageDataset>(encoded_split(c, dir, key, "the config"),
                                                         c.data.augment.out_size, c.data.augment.dct_scaling,
                                                         c.data.augment.transforms);
    };
    return {split(c.data.train_dir, "data.train_dir"), split(c.data.val_dir, "data.val_dir")};
  }
  auto idx = data::load_mnist_style_splits(c.data.root);
  return {std::move(idx.train), std::move(idx.test)};
}

data::SplitListing split_listing(const Config& c, bool train) {
  if (c.data.dataset == Dataset::kSynthetic) {
    const int64_t side = c.data.augment.out_size,
                  images = train ? c.data.synthetic_train_size : c.data.synthetic_test_size;
    // Its images are a function of these numbers: they are its one entry.
    const std::string what =
        fmt::format("synthetic: train.seed {}, first image {}, {}x{}x{}, 10 classes", c.train.seed,
                    train ? 0 : c.data.synthetic_train_size, c.data.synthetic_channels, side, side);
    return {"synthetic", "the synthetic " + std::string(train ? "train" : "test") + " split", images, 1,
            [what, images](int64_t) {
              return data::ListedEntry{what, images};
            }};
  }
  if (is_encoded_dataset(c)) {
    const std::string& dir = train ? c.data.train_dir : c.data.val_dir;
    const auto source = encoded_split(c, dir, train ? "data.train_dir" : "data.val_dir", "the config");
    return {c.data.dataset == Dataset::kHdf5 ? "hdf5" : "imagefolder", source->root(), source->size(), source->size(),
            [source](int64_t i) { return source->listed(i); }};
  }
  return data::mnist_style_listing(c.data.root, train ? data::Split::kTrain : data::Split::kTest);
}

data::AugmentOptions augment_options(const Config& c) { return c.data.augment; }

model::ResNetOptions backbone_options(const Config& c, int64_t in_channels) {
  auto e = model::resnet_options_for(to_string(c.model.arch));
  e.in_channels = in_channels;
  e.small_stem = c.model.small_stem;
  e.small_stem_stride = c.model.stem_stride;
  if (c.model.width > 0) e.width = c.model.width;
  e.zero_init_residual = c.model.zero_init_residual;
  e.activation_checkpointing = c.model.activation_checkpointing;
  e.out_dim = c.model.dim;
  return e;
}

model::ViTOptions vit_options(const Config& c, int64_t in_channels) {
  auto o = model::vit_options_for(to_string(c.model.arch));
  o.image_size = c.data.augment.out_size;
  o.in_channels = in_channels;
  o.out_dim = c.model.dim;
  o.activation_checkpointing = c.model.activation_checkpointing;
  return o;
}

model::Backbone make_backbone(const Config& c, int64_t in_channels) {
  if (is_vit(c.model.arch)) return model::VisionTransformer(vit_options(c, in_channels));
  return model::ResNet(backbone_options(c, in_channels));
}

}  // namespace moco::run
