// defines: ImageFolder (torchvision's layout: root/<class>/**/<image>.{jpg,jpeg,png}, classes
// sorted), scan_image_folder, ImageFolderSource (its files read from disk), ImageFolderDataset
// (the EncodedImageDataset over them)
#pragma once

#include "data/encoded_dataset.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace moco::data {

// A folder that is missing, holds no class folder, or a class folder without images (and for
// packed shards: none found, or shards that do not belong together): the user's setup, so train/
// reports it as a config error (exit 2) before any work.
class FolderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImageFolder {
  std::string root;
  std::vector<std::string> classes;  // sorted; a sample's label is its class's position here
  std::vector<std::string> files;    // paths relative to root, as torchvision orders them
  std::vector<int64_t> labels;
  std::vector<int64_t> sizes;  // each file's bytes as the scan saw them (the split's fingerprint, data/fingerprint.h)
};

// As torchvision.datasets.ImageFolder: class folders sorted by name, each walked recursively
// (following links), files sorted by folder then name, extensions .jpg .jpeg .png in any case.
// folders_walked, if given, receives every folder listed ("." for root, then paths relative to
// it): what file_list_cache.h watches.
ImageFolder scan_image_folder(const std::string& root, std::vector<std::string>* folders_walked = nullptr);

// The file's whole contents; DecodeError (cannot open, empty, short read) naming no path: callers do.
std::vector<uint8_t> read_whole_file(const std::string& path);

class ImageFolderSource : public EncodedSource {
 public:
  explicit ImageFolderSource(ImageFolder folder) : folder_(std::move(folder)) {}
  int64_t size() const override { return static_cast<int64_t>(folder_.files.size()); }
  const std::vector<std::string>& classes() const override { return folder_.classes; }
  int64_t label(int64_t index) const override { return folder_.labels[static_cast<size_t>(index)]; }
  std::vector<uint8_t> read(int64_t index) const override { return read_whole_file(describe(index)); }
  std::string describe(int64_t index) const override;  // root/relative path
  std::string root() const override { return folder_.root; }
  ListedEntry listed(int64_t index) const override;
  const ImageFolder& folder() const { return folder_; }

 private:
  ImageFolder folder_;
};

// The train or val split of an ImageFolder, decoded per sample (see EncodedImageDataset).
class ImageFolderDataset : public EncodedImageDataset {
 public:
  ImageFolderDataset(ImageFolder folder, int64_t eval_size, bool dct_scaling, Transforms transforms);
  const ImageFolder& folder() const { return static_cast<const ImageFolderSource&>(source()).folder(); }
};

}  // namespace moco::data
