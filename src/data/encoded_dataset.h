// defines: EncodedSource (a split's encoded image files by index: bytes, label, a name for
// messages), EncodedImageDataset (the Dataset over any source: evaluation views, bad files skipped)
#pragma once

#include "data/augment_options.h"
#include "data/dataset.h"
#include "data/fingerprint.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace moco::data {

// Where a split's encoded images live: files under an ImageFolder (image_folder.h) or packed HDF5
// shards (image_shards.h). Implementations must be safe to call from several threads at once.
class EncodedSource {
 public:
  virtual ~EncodedSource() = default;
  virtual int64_t size() const = 0;
  virtual const std::vector<std::string>& classes() const = 0;
  virtual int64_t label(int64_t index) const = 0;
  // The sample's JPEG/PNG bytes as stored; DecodeError when they cannot be read.
  virtual std::vector<uint8_t> read(int64_t index) const = 0;
  // The sample for messages: the file's path, or the shard and the original path.
  virtual std::string describe(int64_t index) const = 0;
  // The split for messages (a folder, or a shard pattern).
  virtual std::string root() const = 0;
  // The sample as the split's listing records it (its path relative to the split's folder, its size
  // as scanned or packed, its label): what the data's fingerprint hashes (data/fingerprint.h).
  virtual ListedEntry listed(int64_t index) const = 0;
};

// get() gives the evaluation view: Resize(S * 256 / 224) (shorter side, antialiased) +
// CenterCrop(S), uint8 [3, S, S], with S = eval_size, of `transforms` (encoded_views.h). The same class serves every
// source, so an ImageFolder and its packed shards give the same samples, views and skipped files.
class EncodedImageDataset : public Dataset {
 public:
  EncodedImageDataset(std::shared_ptr<const EncodedSource> source, int64_t eval_size, bool dct_scaling,
                      Transforms transforms);

  int64_t size() const override { return source_->size(); }
  Example get(int64_t index) const override;
  int64_t channels() const override { return 3; }
  int64_t height() const override { return eval_size_; }
  int64_t width() const override { return eval_size_; }
  int64_t num_classes() const override { return static_cast<int64_t>(source_->classes().size()); }
  bool is_encoded() const override { return true; }
  int64_t with_encoded(int64_t index, const EncodedUse& use) const override;
  int64_t bad_files() const override { return bad_count_.load(); }

  const EncodedSource& source() const { return *source_; }
  bool dct_scaling() const { return dct_scaling_; }

 private:
  std::shared_ptr<const EncodedSource> source_;
  int64_t eval_size_;
  bool dct_scaling_;
  Transforms transforms_;
  mutable std::mutex bad_mu_;
  mutable std::set<int64_t> bad_;  // known bad: skipped without reading them again
  mutable std::atomic<int64_t> bad_count_{0};
};

}  // namespace moco::data
