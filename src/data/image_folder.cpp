#include "data/image_folder.h"

#include "data/image_decode.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <utility>

namespace moco::data {
namespace fs = std::filesystem;
namespace {

bool has_image_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DecodeError("cannot open the file");
  const std::streamsize size = in.tellg();
  if (size <= 0) throw DecodeError(size == 0 ? "empty file" : "cannot read the file");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) throw DecodeError("cannot read the file");
  return bytes;
}

ImageFolder scan_image_folder(const std::string& root, std::vector<std::string>* folders_walked) {
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
  if (folders_walked) folders_walked->assign(1, ".");
  for (size_t label = 0; label < folder.classes.size(); ++label) {
    const fs::path class_dir = fs::path(root) / folder.classes[label];
    // torchvision: sorted(os.walk(class_dir)) then sorted(file names): by folder, then by name.
    std::vector<std::tuple<std::string, std::string, int64_t>> found;  // folder, name, size
    if (folders_walked) folders_walked->push_back(folder.classes[label]);
    for (auto it = fs::recursive_directory_iterator(class_dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && has_image_extension(it->path())) {
        std::error_code size_ec;  // a file gone since it was listed: -1, skipped as unreadable when it is read
        const auto size = it->file_size(size_ec);
        found.emplace_back(it->path().parent_path().string(), it->path().filename().string(),
                           size_ec ? int64_t{-1} : static_cast<int64_t>(size));
      } else if (folders_walked && !ec && it->is_directory(ec))
        folders_walked->push_back(it->path().lexically_relative(root).string());
    }
    if (ec) throw FolderError(class_dir.string() + ": cannot list the folder: " + ec.message());
    if (found.empty()) throw FolderError(class_dir.string() + ": class folder without images (.jpg, .jpeg, .png)");
    std::sort(found.begin(), found.end());
    for (const auto& [dir, name, size] : found) {
      // Lexical, not fs::relative: no system call per file, and a linked class folder keeps its name.
      folder.files.push_back((fs::path(dir) / name).lexically_relative(root).string());
      folder.labels.push_back(static_cast<int64_t>(label));
      folder.sizes.push_back(size);
    }
  }
  return folder;
}

std::string ImageFolderSource::describe(int64_t index) const {
  return (fs::path(folder_.root) / folder_.files[static_cast<size_t>(index)]).string();
}

ListedEntry ImageFolderSource::listed(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  return {folder_.files[i], folder_.sizes[i], folder_.labels[i]};
}

ImageFolderDataset::ImageFolderDataset(ImageFolder folder, int64_t eval_size, bool dct_scaling, Transforms transforms)
    : EncodedImageDataset(std::make_shared<ImageFolderSource>(std::move(folder)), eval_size, dct_scaling, transforms) {}

}  // namespace moco::data
