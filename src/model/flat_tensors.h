// defines: FlatTensors (tensors of one dtype and device bound to one buffer, each its own slice, so
// that one op on the buffer updates them all: Note [Flat buffers]), flat_tensors_by_kind
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moco::model {

// Note [Flat buffers]
// A step updates every parameter and BatchNorm buffer of both encoders: the momentum update, SGD,
// the NaN skip's restore, rank 0's BN buffers. Tensor by tensor that is thousands of ops on a
// ResNet-50, each a kernel launch on a GPU. So the tensors of one kind live in one buffer, each as
// its slice (set_data, as Module::to does: the same tensor, its storage now the buffer's), and an
// update is a few ops on buffers. An elementwise op gives an element the same float operations
// wherever it lies in its tensor, so the results are bit for bit those of the per-tensor ops.
// Slices start every 512 bytes, as the CUDA caching allocator's blocks do, so a kernel or cuDNN sees
// the alignment a tensor of its own would have; the gaps hold zeros, which every update keeps zero
// (m*0 + (1-m)*0, 0 + wd*0, ...). Something that moves a tensor off its slice (Module::to,
// use_channels_last, set_data) is noticed from the tensors' metadata the next time the buffer is
// asked for, and the tensors are bound again, in their new memory order where it changed.
class FlatTensors {
 public:
  static constexpr int64_t kAlignBytes = 512;

  FlatTensors() = default;
  // `tensors`: one dtype and one device, each dense (in any memory order). Tensors that lie in one
  // buffer in this layout already (another FlatTensors bound them) stay there: both then share it.
  explicit FlatTensors(std::vector<torch::Tensor> tensors);

  // The buffer, after binding again any tensor that left its slice. Checks metadata only: no op.
  const torch::Tensor& flat();
  // Changes whenever a binding changes the layout (offsets, shapes or memory orders): a buffer made
  // with zeros() or slice() for an older layout no longer matches.
  int64_t layout_version() const { return layout_version_; }
  bool same_layout(const FlatTensors& other) const;

  // A zero buffer of this layout: the same dtype, device and size as flat().
  torch::Tensor zeros() const;
  // Tensor i's slice of `buffer` (of this layout), in tensor i's shape and memory order.
  torch::Tensor slice(const torch::Tensor& buffer, size_t i) const;
  // Tensors [begin, end) of `buffer` (of this layout): one 1-D narrow, gaps included.
  torch::Tensor span(const torch::Tensor& buffer, size_t begin, size_t end) const;
  // Whether `tensor` is slice(buffer, i) (metadata only).
  bool is_slice(const torch::Tensor& tensor, const torch::Tensor& buffer, size_t i) const;

  // An update through the buffer leaves the tensors' version counters alone (the buffer has its
  // own). After one that autograd must see, this bumps them as an in-place op on each would.
  void bump_versions() const;

  const std::vector<torch::Tensor>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }

 private:
  void bind();
  bool bound() const;

  std::vector<torch::Tensor> tensors_;
  std::vector<int64_t> offsets_;  // in elements
  std::vector<std::vector<int64_t>> sizes_, strides_;
  int64_t numel_ = 0;
  int64_t layout_version_ = 0;
  torch::Tensor flat_;
};

// `tensors` bound into one FlatTensors per (dtype, device), in first-seen order, each keeping the
// tensors' order (a model's BatchNorm buffers: float statistics and int64 counts).
std::vector<FlatTensors> flat_tensors_by_kind(const std::vector<torch::Tensor>& tensors);

}  // namespace moco::model
