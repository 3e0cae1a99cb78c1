// defines: Dataset (index -> image + label), InMemoryDataset (a whole split held as one tensor)
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace moco::data {

struct Example {
  torch::Tensor image;  // uint8 [C, H, W]
  int64_t label = -1;
};

// Images are uint8 [C, H, W]; augmentation turns them into float. Implementations must be safe to
// call from several loader threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  virtual int64_t channels() const = 0;
  virtual int64_t height() const = 0;
  virtual int64_t width() const = 0;
  virtual int64_t num_classes() const = 0;

  // uint8 [n, C, H, W] and int64 [n]. The default stacks get(); in-memory sets index in one op.
  virtual std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<int64_t>& indices) const;

  // Datasets of encoded files of any size (ImageFolder) return true: the loader then makes each
  // training view from the sample's own bytes (encoded_views.h), while get() and get_batch() serve
  // fixed-size evaluation views (height() x width()).
  virtual bool is_encoded() const { return false; }
  // Encoded datasets: calls use(bytes, size, label) with sample `index`'s file. A file that cannot
  // be read, or on which `use` throws DecodeError, is logged with its path, counted and skipped:
  // the next sample (index + 1, ...) is used instead, so a batch never holds a black image or a
  // hole. Returns the index whose bytes were used. The base class throws std::logic_error.
  using EncodedUse = std::function<void(const uint8_t* bytes, size_t size, int64_t label)>;
  virtual int64_t with_encoded(int64_t index, const EncodedUse& use) const;
  // Files skipped so far as unreadable or corrupt.
  virtual int64_t bad_files() const { return 0; }
};

class InMemoryDataset : public Dataset {
 public:
  // images: uint8 [N, C, H, W]; labels: int64 [N] with values in [0, num_classes).
  InMemoryDataset(torch::Tensor images, torch::Tensor labels, int64_t num_classes);

  int64_t size() const override;
  Example get(int64_t index) const override;
  int64_t channels() const override;
  int64_t height() const override;
  int64_t width() const override;
  int64_t num_classes() const override { return num_classes_; }
  std::pair<torch::Tensor, torch::Tensor> get_batch(const std::vector<int64_t>& indices) const override;

  const torch::Tensor& images() const { return images_; }
  const torch::Tensor& labels() const { return labels_; }

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
  int64_t num_classes_;
};

}  // namespace moco::data
