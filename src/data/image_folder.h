// defines: ImageFolder (torchvision's layout: root/<class>/**/<image>.{jpg,jpeg,png}, classes
// sorted), scan_image_folder, ImageFolderDataset (its files, decoded per sample)
#pragma once

#include "data/dataset.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {

// A folder that is missing, holds no class folder, or a class folder without images: the user's
// setup, so train/ reports it as a config error (exit 2) before any work.
class FolderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImageFolder {
  std::string root;
  std::vector<std::string> classes;  // sorted; a sample's label is its class's position here
  std::vector<std::string> files;    // paths relative to root, as torchvision orders them
  std::vector<int64_t> labels;
};

// As torchvision.datasets.ImageFolder: class folders sorted by name, each walked recursively
// (following links), files sorted by folder then name, extensions .jpg .jpeg .png in any case.
ImageFolder scan_image_folder(const std::string& root);

// The train or val split of an ImageFolder. get() gives the evaluation view: Resize(S * 256 / 224)
// (shorter side, antialiased) + CenterCrop(S), uint8 [3, S, S], with S = eval_size.
class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(ImageFolder folder, int64_t eval_size, bool dct_scaling);

  int64_t size() const override { return static_cast<int64_t>(folder_.files.size()); }
  Example get(int64_t index) const override;
  int64_t channels() const override { return 3; }
  int64_t height() const override { return eval_size_; }
  int64_t width() const override { return eval_size_; }
  int64_t num_classes() const override { return static_cast<int64_t>(folder_.classes.size()); }
  bool is_encoded() const override { return true; }
  int64_t with_encoded(int64_t index, const EncodedUse& use) const override;
  int64_t bad_files() const override { return bad_count_.load(); }

  const ImageFolder& folder() const { return folder_; }
  bool dct_scaling() const { return dct_scaling_; }

 private:
  ImageFolder folder_;
  int64_t eval_size_;
  bool dct_scaling_;
  mutable std::mutex bad_mu_;
  mutable std::set<int64_t> bad_;  // known bad: skipped without reading them again
  mutable std::atomic<int64_t> bad_count_{0};
};

}  // namespace moco::data
