#include "data/encoded_dataset.h"

#include "data/encoded_views.h"
#include "data/image_decode.h"
#include "data/image_folder.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

namespace moco::data {

EncodedImageDataset::EncodedImageDataset(std::shared_ptr<const EncodedSource> source, int64_t eval_size,
                                         bool dct_scaling, Transforms transforms)
    : source_(std::move(source)), eval_size_(eval_size), dct_scaling_(dct_scaling), transforms_(transforms) {
  if (!source_) throw std::invalid_argument("EncodedImageDataset: no source");
  if (source_->size() == 0) throw FolderError(source_->root() + ": no images");
  if (eval_size_ <= 0) throw std::invalid_argument("EncodedImageDataset: eval_size must be positive");
}

int64_t EncodedImageDataset::with_encoded(int64_t index, const EncodedUse& use) const {
  const int64_t n = size();
  if (index < 0 || index >= n)
    throw std::out_of_range("image index " + std::to_string(index) + " outside [0, " + std::to_string(n) + ")");
  for (int64_t tries = 0; tries < n; ++tries) {
    const int64_t i = (index + tries) % n;
    {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.count(i)) continue;
    }
    try {
      const std::vector<uint8_t> bytes = source_->read(i);
      use(bytes.data(), bytes.size(), source_->label(i));
      return i;
    } catch (const DecodeError& e) {
      std::lock_guard<std::mutex> lock(bad_mu_);
      if (bad_.insert(i).second) {
        ++bad_count_;
        spdlog::warn("skipping unreadable image {}: {} ({} skipped so far)", source_->describe(i), e.what(),
                     bad_count_.load());
      }
    }
  }
  throw std::runtime_error(source_->root() + ": not one of its " + std::to_string(n) + " images can be decoded");
}

Example EncodedImageDataset::get(int64_t index) const {
  Example example;
  with_encoded(index, [&](const uint8_t* bytes, size_t size, int64_t label) {
    Image view = encoded_eval_view(bytes, size, eval_size_, dct_scaling_, transforms_);
    example.image = torch::from_blob(view.pixels.data(), {3, eval_size_, eval_size_}, torch::kUInt8).clone();
    example.label = label;
  });
  return example;
}

}  // namespace moco::data
