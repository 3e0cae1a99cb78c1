#include "model/flat_tensors.h"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace moco::model {
namespace {

bool same_storage(const torch::Tensor& a, const torch::Tensor& b) {
  return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

FlatTensors::FlatTensors(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (!t.defined() || !t.is_non_overlapping_and_dense())
      throw std::invalid_argument("FlatTensors: tensor " + std::to_string(i) + " is undefined or not dense");
    if (t.scalar_type() != tensors_[0].scalar_type() || t.device() != tensors_[0].device())
      throw std::invalid_argument("FlatTensors: tensor " + std::to_string(i) + " is of another dtype or device");
  }
  bind();
}

bool FlatTensors::bound() const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!is_slice(tensors_[i], flat_, i)) return false;
  return true;
}

const torch::Tensor& FlatTensors::flat() {
  if (!bound()) bind();
  return flat_;
}

// The layout of the tensors as they are now; then either the buffer they already share (its
// storage, seen through a tensor of its own) or a new one they are copied into and bound to.
void FlatTensors::bind() {
  std::vector<int64_t> offsets;
  std::vector<std::vector<int64_t>> sizes, strides;
  int64_t end = 0;
  const int64_t align = tensors_.empty() ? 1 : std::max<int64_t>(1, kAlignBytes / tensors_[0].element_size());
  for (const auto& t : tensors_) {
    const int64_t offset = (end + align - 1) / align * align;
    offsets.push_back(offset);
    sizes.push_back(t.sizes().vec());
    strides.push_back(t.strides().vec());
    end = offset + t.numel();
  }
  if (offsets != offsets_ || sizes != sizes_ || strides != strides_) ++layout_version_;
  offsets_ = std::move(offsets), sizes_ = std::move(sizes), strides_ = std::move(strides), numel_ = end;
  const auto options = tensors_.empty() ? torch::TensorOptions() : tensors_[0].options();
  torch::NoGradGuard no_grad;
  if (!tensors_.empty() &&
      static_cast<int64_t>(tensors_[0].storage().nbytes()) >= numel_ * tensors_[0].element_size()) {
    flat_ = torch::empty({0}, options).set_(tensors_[0].storage(), 0, {numel_}, {1});
    if (bound()) return;
  }
  flat_ = torch::zeros({numel_}, options);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    auto slice_i = slice(flat_, i);
    slice_i.copy_(tensors_[i]);
    tensors_[i].set_data(slice_i);
  }
}

bool FlatTensors::same_layout(const FlatTensors& other) const {
  return offsets_ == other.offsets_ && sizes_ == other.sizes_ && strides_ == other.strides_;
}

torch::Tensor FlatTensors::zeros() const { return torch::zeros_like(flat_); }

torch::Tensor FlatTensors::slice(const torch::Tensor& buffer, size_t i) const {
  return buffer.as_strided(sizes_[i], strides_[i], buffer.storage_offset() + offsets_[i]);
}

torch::Tensor FlatTensors::span(const torch::Tensor& buffer, size_t begin, size_t end) const {
  if (begin >= end) return buffer.narrow(0, 0, 0);
  const int64_t last = offsets_[end - 1] + tensors_[end - 1].numel();
  return buffer.narrow(0, offsets_[begin], last - offsets_[begin]);
}

bool FlatTensors::is_slice(const torch::Tensor& tensor, const torch::Tensor& buffer, size_t i) const {
  return tensor.defined() && buffer.defined() && same_storage(tensor, buffer) &&
         tensor.storage_offset() == buffer.storage_offset() + offsets_[i] && tensor.sizes() == sizes_[i] &&
         tensor.strides() == strides_[i];
}

void FlatTensors::bump_versions() const {
  for (const auto& t : tensors_) t.unsafeGetTensorImpl()->bump_version();
}

std::vector<FlatTensors> flat_tensors_by_kind(const std::vector<torch::Tensor>& tensors) {
  std::vector<std::vector<torch::Tensor>> groups;
  for (const auto& t : tensors) {
    size_t g = 0;
    while (g < groups.size() && (groups[g][0].scalar_type() != t.scalar_type() || groups[g][0].device() != t.device()))
      ++g;
    if (g == groups.size()) groups.emplace_back();
    groups[g].push_back(t);
  }
  std::vector<FlatTensors> kinds;
  for (auto& group : groups) kinds.emplace_back(std::move(group));
  return kinds;
}

}  // namespace moco::model
