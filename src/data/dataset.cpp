#include "data/dataset.h"

#include <torch/torch.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace moco::data {
namespace {

std::string shape_of(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

void check_index(int64_t index, int64_t size) {
  if (index < 0 || index >= size) {
    throw std::out_of_range("dataset index " + std::to_string(index) + " out of range [0, " + std::to_string(size) +
                            ")");
  }
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> Dataset::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) {
    return {torch::empty({0, channels(), height(), width()}, torch::kUInt8), torch::empty({0}, torch::kInt64)};
  }
  std::vector<torch::Tensor> images;
  std::vector<int64_t> labels;
  images.reserve(indices.size());
  labels.reserve(indices.size());
  for (int64_t index : indices) {
    Example example = get(index);
    images.push_back(std::move(example.image));
    labels.push_back(example.label);
  }
  return {torch::stack(images), torch::tensor(labels, torch::kInt64)};
}

int64_t Dataset::with_encoded(int64_t, const EncodedUse&) const {
  throw std::logic_error("with_encoded called on a dataset of decoded images");
}

InMemoryDataset::InMemoryDataset(torch::Tensor images, torch::Tensor labels, int64_t num_classes)
    : num_classes_(num_classes) {
  if (!images.defined() || images.dim() != 4 || images.scalar_type() != torch::kUInt8) {
    throw std::invalid_argument("InMemoryDataset: images must be uint8 [N, C, H, W], got " +
                                (images.defined() ? std::string(toString(images.scalar_type())) + " " + shape_of(images)
                                                  : std::string("an undefined tensor")));
  }
  if (!labels.defined() || labels.dim() != 1 || labels.scalar_type() != torch::kInt64) {
    throw std::invalid_argument("InMemoryDataset: labels must be int64 [N], got " +
                                (labels.defined() ? std::string(toString(labels.scalar_type())) + " " + shape_of(labels)
                                                  : std::string("an undefined tensor")));
  }
  if (labels.size(0) != images.size(0)) {
    throw std::invalid_argument("InMemoryDataset: " + std::to_string(images.size(0)) + " images but " +
                                std::to_string(labels.size(0)) + " labels");
  }
  if (num_classes <= 0) {
    throw std::invalid_argument("InMemoryDataset: num_classes must be positive, got " + std::to_string(num_classes));
  }
  if (labels.numel() > 0) {
    const int64_t lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    if (lo < 0 || hi >= num_classes) {
      throw std::invalid_argument("InMemoryDataset: labels span [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "], outside [0, " + std::to_string(num_classes) + ")");
    }
  }
  // Contiguous CPU storage makes get() a cheap view and index_select a single gather.
  images_ = images.to(torch::kCPU).contiguous();
  labels_ = labels.to(torch::kCPU).contiguous();
}

int64_t InMemoryDataset::size() const { return images_.size(0); }
int64_t InMemoryDataset::channels() const { return images_.size(1); }
int64_t InMemoryDataset::height() const { return images_.size(2); }
int64_t InMemoryDataset::width() const { return images_.size(3); }

Example InMemoryDataset::get(int64_t index) const {
  check_index(index, size());
  // A view, not a copy: callers treat images as read-only, and views keep get() allocation-free.
  return {images_[index], labels_.data_ptr<int64_t>()[index]};
}

std::pair<torch::Tensor, torch::Tensor> InMemoryDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_index(index, size());
  const torch::Tensor idx = torch::tensor(indices, torch::kInt64);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}

}  // namespace moco::data
