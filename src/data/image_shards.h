// defines: the packed image shards of a split (moco_pack writes them, image_pack.h):
// shard_file_name, ImageShardSource (the shards as an EncodedSource, samples read with pread)
#pragma once

#include "data/encoded_dataset.h"

#include <string>
#include <vector>

namespace moco::data {

// "<split>-<shard>-of-<num_shards>.h5", five digits each: train-00000-of-00004.h5.
std::string shard_file_name(const std::string& split, int shard, int num_shards);
// The other way: true, with shard and num_shards, for a name shard_file_name makes for `split`.
bool parse_shard_file_name(const std::string& name, const std::string& split, int& shard, int& num_shards);

// What a shard holds (HDF5, readable with h5py):
//   images   uint8 [bytes]    the image files' bytes, unchanged, one after another; contiguous and
//                             unfiltered, so a sample is one pread at H5Dget_offset + its offset
//   offsets  int64 [n]        where each sample starts in `images`
//   sizes    int64 [n]        its length in bytes
//   labels   int64 [n]        its class, a position in `classes`
//   paths    str [n]          its path relative to the split's folder (for messages)
//   classes  str [C]          every class of the split, sorted as torchvision sorts them
//   root attributes: format (kShardFormat), split, source (the packed folder), shard_index,
//   num_shards, first_index (global index of its first sample), total_images (of the split),
//   pack_id (the same in every shard of one pack, and in its marker).
// Samples are assigned to shards contiguously in ImageFolder order: shard s holds the global
// indices [first_index, first_index + n), so the split in shard order is the ImageFolder's order.
inline constexpr const char* kShardFormat = "moco_dist image shard 1";

// A split's shards are complete or absent: moco_pack writes the marker "<split>.complete" beside
// them last, once every shard has its final name, and a pack that replaces them removes it first.
// One line, "moco_pack pack <pack_id>: <num_shards> shards". A reader refuses a split without it,
// or with a shard of another pack_id: what a pack killed during its renames leaves.
std::string pack_marker_name(const std::string& split);
std::string pack_marker_text(int64_t pack_id, int num_shards);
// Reads dir's marker of `split`; false where there is none or it is not one.
bool read_pack_marker(const std::string& dir, const std::string& split, int64_t& pack_id, int& num_shards);

// Every shard of `split` in `dir`. A missing folder, no shard, shards of different counts or with
// one missing, no marker (an interrupted pack), a shard that is not ours or disagrees with the
// others (classes, first_index, total_images, pack_id): FolderError naming the folder or the shard. The HDF5 files are
// read once here; samples are then read with pread, from any number of threads.
class ImageShardSource : public EncodedSource {
 public:
  ImageShardSource(const std::string& dir, const std::string& split);
  ~ImageShardSource() override;
  ImageShardSource(const ImageShardSource&) = delete;
  ImageShardSource& operator=(const ImageShardSource&) = delete;

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const std::vector<std::string>& classes() const override { return classes_; }
  int64_t label(int64_t index) const override { return labels_[static_cast<size_t>(index)]; }
  std::vector<uint8_t> read(int64_t index) const override;
  std::string describe(int64_t index) const override;  // "<shard file> (<original path>)"
  std::string root() const override { return pattern_; }
  ListedEntry listed(int64_t index) const override;  // the packed file's path, size and label
  int num_shards() const { return static_cast<int>(shards_.size()); }
  const std::string& original_path(int64_t index) const { return paths_[static_cast<size_t>(index)]; }

 private:
  struct Shard {
    std::string path;
    int fd = -1;
    int64_t first = 0;  // global index of its first sample
  };
  const Shard& shard_of(int64_t index) const;

  std::string pattern_;  // dir/split-*.h5, for messages
  std::vector<Shard> shards_;
  std::vector<std::string> classes_, paths_;
  std::vector<int64_t> labels_, file_offsets_, sizes_;  // per global index; file_offsets_: in its shard's file
  int64_t total_images_seen_ = 0;
};

}  // namespace moco::data
