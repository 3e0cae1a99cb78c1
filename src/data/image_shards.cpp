#include "data/image_shards.h"

#include "h5/attributes.h"
#include "data/image_decode.h"
#include "data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace moco::data {
namespace fs = std::filesystem;
namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool parse_shard_file_name(const std::string& name, const std::string& split, int& shard, int& count) {
  const std::string prefix = split + "-";
  if (name.size() != prefix.size() + 17 || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());  // 00000-of-00004.h5
  if (rest.compare(5, 4, "-of-") != 0 || rest.compare(14, 3, ".h5") != 0) return false;
  const std::string s = rest.substr(0, 5), n = rest.substr(9, 5);
  if (!all_digits(s) || !all_digits(n)) return false;
  shard = std::stoi(s);
  count = std::stoi(n);
  return true;
}

namespace {

// Everything a shard's HDF5 structure says; FolderError naming the shard for anything amiss.
struct ShardContents {
  int64_t shard_index = -1, num_shards = -1, first_index = -1, total_images = -1;
  int64_t pack_id = 0;  // 0: none (a shard of an older moco_pack)
  std::vector<std::string> classes, paths;
  std::vector<int64_t> offsets, sizes, labels;
  int64_t images_offset = 0, images_bytes = 0;  // where `images` lies in the file
};

ShardContents read_contents(const std::string& path) {
  auto bad = [&](const std::string& what) { return FolderError(path + ": " + what); };
  auto held = h5::lock();
  h5::init_once();
  h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.ok()) throw bad("cannot open as HDF5 (" + h5::error_text() + ")");
  ShardContents c;
  std::string format;
  if (!h5::read_string_attribute(file.get(), "format", format) || format != kShardFormat)
    throw bad("not an image shard of moco_pack (attribute 'format' is not '" + std::string(kShardFormat) + "')");
  if (!h5::read_int_attribute(file.get(), "shard_index", c.shard_index) ||
      !h5::read_int_attribute(file.get(), "num_shards", c.num_shards) ||
      !h5::read_int_attribute(file.get(), "first_index", c.first_index) ||
      !h5::read_int_attribute(file.get(), "total_images", c.total_images))
    throw bad("missing attribute shard_index, num_shards, first_index or total_images");
  if (!h5::read_int_attribute(file.get(), "pack_id", c.pack_id)) c.pack_id = 0;
  if (!h5::read_strings(file.get(), "classes", c.classes) || !h5::read_strings(file.get(), "paths", c.paths))
    throw bad("cannot read 'classes' or 'paths' (" + h5::error_text() + ")");
  if (!h5::read_int64s(file.get(), "offsets", c.offsets) || !h5::read_int64s(file.get(), "sizes", c.sizes) ||
      !h5::read_int64s(file.get(), "labels", c.labels))
    throw bad("cannot read 'offsets', 'sizes' or 'labels' (" + h5::error_text() + ")");
  h5::Handle images(H5Lexists(file.get(), "images", H5P_DEFAULT) > 0 ? H5Dopen2(file.get(), "images", H5P_DEFAULT)
                                                                     : -1);
  if (!images.ok()) throw bad("no dataset 'images'");
  h5::Handle plist(H5Dget_create_plist(images.get()));
  if (!plist.ok() || H5Pget_layout(plist.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(plist.get()) != 0)
    throw bad("dataset 'images' is not contiguous and unfiltered (it is read with pread)");
  c.images_bytes = static_cast<int64_t>(H5Dget_storage_size(images.get()));
  const haddr_t offset = H5Dget_offset(images.get());
  if (offset == HADDR_UNDEF && c.images_bytes > 0) throw bad("dataset 'images' has no storage");
  c.images_offset = offset == HADDR_UNDEF ? 0 : static_cast<int64_t>(offset);
  H5Eclear2(H5E_DEFAULT);
  const size_t n = c.labels.size();
  if (c.offsets.size() != n || c.sizes.size() != n || c.paths.size() != n)
    throw bad("offsets, sizes, labels and paths differ in length");
  for (size_t i = 0; i < n; ++i) {
    if (c.offsets[i] < 0 || c.sizes[i] < 0 || c.offsets[i] > c.images_bytes - c.sizes[i])
      throw bad("image " + std::to_string(i) + " (" + c.paths[i] + ") lies outside the dataset 'images'");
    if (c.labels[i] < 0 || c.labels[i] >= static_cast<int64_t>(c.classes.size()))
      throw bad("image " + std::to_string(i) + " (" + c.paths[i] + ") has label " + std::to_string(c.labels[i]) +
                " outside its " + std::to_string(c.classes.size()) + " classes");
  }
  return c;
}

}  // namespace

std::string pack_marker_name(const std::string& split) { return split + ".complete"; }

std::string pack_marker_text(int64_t pack_id, int num_shards) {
  return "moco_pack pack " + std::to_string(pack_id) + ": " + std::to_string(num_shards) + " shards\n";
}

bool read_pack_marker(const std::string& dir, const std::string& split, int64_t& pack_id, int& num_shards) {
  std::ifstream in(fs::path(dir) / pack_marker_name(split));
  std::string line;
  if (!std::getline(in, line)) return false;
  long long id = 0;
  int n = 0;
  char end = 0;
  if (std::sscanf(line.c_str(), "moco_pack pack %lld: %d shard%c", &id, &n, &end) != 3 || end != 's' || id <= 0)
    return false;
  pack_id = id;
  num_shards = n;
  return true;
}

namespace {

std::string repack_hint(const std::string& dir) { return "; re-run moco_pack into " + dir + " (with --overwrite)"; }

// The pack id dir's marker of `split` names, for `count` shards; FolderError where it is missing
// (an interrupted pack) or says another count.
int64_t marked_pack(const std::string& dir, const std::string& split, int count) {
  const std::string marker = (fs::path(dir) / pack_marker_name(split)).string();
  int64_t pack_id = 0;
  int marked = 0;
  if (!read_pack_marker(dir, split, pack_id, marked))
    throw FolderError(dir + ": the pack of split '" + split + "' is incomplete: no " + marker +
                      " (moco_pack was interrupted, is still running, or is older than pack markers)" +
                      repack_hint(dir));
  if (marked != count)
    throw FolderError(marker + ": says " + std::to_string(marked) + " shards, the folder holds " +
                      std::to_string(count) + " (shards of two packs)" + repack_hint(dir));
  return pack_id;
}

}  // namespace

std::string shard_file_name(const std::string& split, int shard, int num_shards) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "-%05d-of-%05d.h5", shard, num_shards);
  return split + digits;
}

ImageShardSource::ImageShardSource(const std::string& dir, const std::string& split)
    : pattern_((fs::path(dir) / (split + "-*-of-*.h5")).string()) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw FolderError(dir + ": no such folder");
  std::map<int, std::string> found;  // shard index -> file name
  int count = -1;
  std::string count_from;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int shard = 0, n = 0;
    if (!parse_shard_file_name(name, split, shard, n)) continue;
    if (count >= 0 && n != count)
      throw FolderError((fs::path(dir) / name).string() + ": a shard of " + std::to_string(n) + " beside " +
                        count_from + " of " + std::to_string(count) + " (shards of two packs; remove one)");
    count = n;
    count_from = (fs::path(dir) / name).string();
    found[shard] = name;
  }
  if (ec) throw FolderError(dir + ": cannot list the folder: " + ec.message());
  if (found.empty())
    throw FolderError(dir + ": holds no shard " + shard_file_name(split, 0, 1) +
                      " (or of more shards): pack the split with moco_pack");
  for (int s = 0; s < count; ++s)
    if (!found.count(s))
      throw FolderError((fs::path(dir) / shard_file_name(split, s, count)).string() +
                        ": missing (the pack is incomplete)");
  if (static_cast<int>(found.size()) != count)
    throw FolderError(dir + ": shard numbers beyond the count " + std::to_string(count) + " in " + pattern_);
  const std::string marker = (fs::path(dir) / pack_marker_name(split)).string();
  const int64_t pack_id = marked_pack(dir, split, count);

  try {
    for (int s = 0; s < count; ++s) {
      const std::string path = (fs::path(dir) / found[s]).string();
      ShardContents c = read_contents(path);
      if (c.shard_index != s || c.num_shards != count)
        throw FolderError(path + ": its attributes say shard " + std::to_string(c.shard_index) + " of " +
                          std::to_string(c.num_shards) + ", its name otherwise");
      if (s == 0)
        classes_ = c.classes;
      else if (c.classes != classes_)
        throw FolderError(path + ": its " + std::to_string(c.classes.size()) + " classes are not those of " +
                          shards_[0].path);
      if (c.first_index != size())
        throw FolderError(path + ": starts at image " + std::to_string(c.first_index) +
                          ", but the shards before it end at " + std::to_string(size()));
      if (s > 0 && c.total_images != total_images_seen_)
        throw FolderError(path + ": says the split has " + std::to_string(c.total_images) + " images, " +
                          shards_[0].path + " says " + std::to_string(total_images_seen_));
      total_images_seen_ = c.total_images;
      if (c.pack_id != pack_id)
        throw FolderError(path + ": a shard of another pack than " + marker +
                          " says (an interrupted moco_pack --overwrite)" + repack_hint(dir));
      Shard shard;
      shard.path = path;
      shard.first = size();
      shard.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (shard.fd < 0) throw FolderError(path + ": cannot open: " + std::strerror(errno));
      shards_.push_back(shard);
      struct stat st {};
      if (::fstat(shard.fd, &st) != 0 || st.st_size < c.images_offset + c.images_bytes)
        throw FolderError(path + ": truncated (the images end at byte " +
                          std::to_string(c.images_offset + c.images_bytes) + ", the file at " +
                          std::to_string(st.st_size) + ")");
      for (size_t i = 0; i < c.labels.size(); ++i) {
        labels_.push_back(c.labels[i]);
        file_offsets_.push_back(c.images_offset + c.offsets[i]);
        sizes_.push_back(c.sizes[i]);
        paths_.push_back(std::move(c.paths[i]));
      }
    }
    if (size() != total_images_seen_)
      throw FolderError(pattern_ + ": the shards hold " + std::to_string(size()) + " images, they say the split has " +
                        std::to_string(total_images_seen_));
  } catch (...) {
    for (const auto& s : shards_) ::close(s.fd);
    throw;
  }
}

ImageShardSource::~ImageShardSource() {
  for (const auto& s : shards_) ::close(s.fd);
}

const ImageShardSource::Shard& ImageShardSource::shard_of(int64_t index) const {
  // The last shard starting at or before index.
  auto it =
      std::upper_bound(shards_.begin(), shards_.end(), index, [](int64_t i, const Shard& s) { return i < s.first; });
  return *(it - 1);
}

std::vector<uint8_t> ImageShardSource::read(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  if (sizes_[i] == 0) throw DecodeError("empty file");
  std::vector<uint8_t> bytes(static_cast<size_t>(sizes_[i]));
  const int fd = shard_of(index).fd;
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done,
                                static_cast<off_t>(file_offsets_[i] + static_cast<int64_t>(done)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw DecodeError(std::string("cannot read the shard: ") + std::strerror(errno));
    if (got == 0) throw DecodeError("the shard ends inside the image (truncated)");
    done += static_cast<size_t>(got);
  }
  return bytes;
}

std::string ImageShardSource::describe(int64_t index) const {
  return shard_of(index).path + " (" + paths_[static_cast<size_t>(index)] + ")";
}

ListedEntry ImageShardSource::listed(int64_t index) const {
  const auto i = static_cast<size_t>(index);
  return {paths_[i], sizes_[i], labels_[i]};
}

}  // namespace moco::data
