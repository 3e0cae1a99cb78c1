#include "data/image_folder.h"

#include "data/encoded_views.h"
#include "data/image_decode.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <utility>

namespace moco::data {
namespace fs = std::filesystem;
namespace {

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DecodeError("cannot open the file");
  const std::streamsize size = in.tellg();
  if (size <= 0) throw DecodeError(size == 0 ? "empty file" : "cannot read the file");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) throw DecodeError("cannot read the file");
  return bytes;
}

}  // namespace

ImageFolder scan_image_folder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw FolderError(root + ": no such folder");
  ImageFolder folder;
  folder.root = root;
  for (const auto& entry : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink, ec))
    if (entry.is_directory(ec)) folder.classes.push_back(entry.path().filename().string());
  if (ec) throw FolderError(root + ": cannot list the folder: " + ec.message());
  // Byte order, as Python sorts str names.
  std::sort(folder.classes.begin(), folder.classes.end());
  if (folder.classes.empty()) throw FolderError(root + ": holds no class folder (expected root/<class>/<image>.jpg)");
  for (size_t label = 0; label < folder.classes.size(); ++label) {
    const fs::path class_dir = fs::path(root) / folder.classes[label];
    // torchvision: sorted(os.walk(class_dir)) then sorted(file names): by folder, then by name.
    std::vector<std::pair<std::string, std::string>> found;
    for (auto it = fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && has_image_extension(it->path()))
        found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
    }
    if (ec) throw FolderError(class_dir.string() + ": cannot list the folder: " + ec.message());
    if (found.empty()) throw FolderError(class_dir.string() + ": class folder without images (.jpg, .jpeg, .png)");
    std::sort(found.begin(), found.end());
    for (const auto& [dir, name] : found) {
      // Lexical, not fs::relative: no system call per file, and a linked class folder keeps its name.
      folder.files.push_back((fs::path(dir) / name).lexically_relative(root).string());
      folder.labels.push_back(static_cast<int64_t>(label));
    }
  }
  return folder;
}

ImageFolderDataset::ImageFolderDataset(ImageFolder folder, int64_t eval_size, bool dct_scaling)
    : folder_(std::move(folder)), eval_size_(eval_size), dct_scaling_(dct_scaling) {
  if (folder_.files.empty()) throw FolderError(folder_.root + ": no images");
  if (eval_size_ <= 0) throw std::invalid_argument("ImageFolderDataset: eval_size must be positive");
}

int64_t ImageFolderDataset::with_encoded(int64_t index, const EncodedUse& use) const {
  const int64_t n = size();
  if (index < 0 || index >= n) throw std::out_of_range("ImageFolder index " + std::to_string(index) + " outside [0, " + std::to_string(n) + ")");
  for (int64_t tries = 0; tries < n; ++tries) {
    const int64_t i = (index + tries) % n;
    {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.count(i)) continue;
    }
    const std::string path = (fs::path(folder_.root) / folder_.files[static_cast<size_t>(i)]).string();
    try {
      const std::vector<uint8_t> bytes = read_file(path);
      use(bytes.data(), bytes.size(), folder_.labels[static_cast<size_t>(i)]);
      return i;
    } catch (const DecodeError& e) {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.insert(i).second) {
        ++bad_count_;
        spdlog::warn("skipping unreadable image {}: {} ({} skipped so far)", path, e.what(), bad_count_.load());
      }
    }
  }
  throw std::runtime_error(folder_.root + ": not one of its " + std::to_string(n) + " images can be decoded");
}

Example ImageFolderDataset::get(int64_t index) const {
  Example example;
  with_encoded(index, [&](const uint8_t* bytes, size_t size, int64_t label) {
    Image view = encoded_eval_view(bytes, size, eval_size_, dct_scaling_);
    example.image = torch::from_blob(view.pixels.data(), {3, eval_size_, eval_size_}, torch::kUInt8).clone();
    example.label = label;
  });
  return example;
}

}  // namespace moco::data
