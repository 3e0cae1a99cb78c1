#include "run/device_batches.h"

#if MOCO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <fmt/format.h>
#include <torch/torch.h>

#include <exception>
#include <stdexcept>
#include <utility>

namespace moco::run {
namespace {

torch::Tensor channel_constant(const std::vector<float>& values, torch::Device device) {
  return torch::tensor(values, torch::kFloat).view({1, -1, 1, 1}).to(device);
}

// The views of `batch` onto `device` (indices and labels stay on the host, where the step reads them).
void views_to(data::TwoViewBatch& batch, torch::Device device, bool non_blocking) {
  batch.query = batch.query.to(device, non_blocking);
  if (batch.key.defined()) batch.key = batch.key.to(device, non_blocking);
}

}  // namespace

PixelNormalizer::PixelNormalizer(const std::vector<double>& mean, const std::vector<double>& std, int64_t channels,
                                 torch::Device device) {
  const auto count = static_cast<int64_t>(mean.size());
  if (count == 0 || std.size() != mean.size() || (count != 1 && count != channels))
    throw std::invalid_argument(fmt::format("PixelNormalizer: {} mean and {} std values for {} channels (need 1 or {})",
                                            mean.size(), std.size(), channels, channels));
  std::vector<float> m, s;
  for (int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<size_t>(count == 1 ? 0 : c);  // one value: every channel's, as normalize_into
    m.push_back(static_cast<float>(mean[k]));
    s.push_back(static_cast<float>(std[k]));
  }
  // Tensors on the device, even the 255: CUDA divides by a CPU scalar as a multiplication by its
  // reciprocal, which is not x / 255 bit for bit; a tensor operand is divided by.
  scale_ = channel_constant(std::vector<float>(static_cast<size_t>(channels), 255.0f), device);
  mean_ = channel_constant(m, device);
  std_ = channel_constant(s, device);
}

torch::Tensor PixelNormalizer::operator()(const torch::Tensor& pixels) const {
  return pixels.to(torch::kFloat).div_(scale_).sub_(mean_).div_(std_);
}

struct DeviceBatches::Staged {
  data::TwoViewBatch batch;  // uint8 views on the device (or on their way there)
#if MOCO_WITH_CUDA
  std::optional<at::cuda::CUDAEvent> copied;  // recorded on the side stream after the views' copies
#endif
};

struct DeviceBatches::CopyLane {
#if MOCO_WITH_CUDA
  c10::cuda::CUDAStream stream;
#endif
};

DeviceBatches::DeviceBatches(data::TwoViewLoader& loader, const data::AugmentOptions& augment, int64_t channels,
                             torch::Device device)
    : loader_(loader), device_(device) {
  if (!loader.options().uint8_views) return;
  normalize_.emplace(augment.mean, augment.std, channels, device);
#if MOCO_WITH_CUDA
  if (device.is_cuda())
    lane_.reset(new CopyLane{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())});
#endif
}

DeviceBatches::~DeviceBatches() = default;

void DeviceBatches::start_epoch(int64_t epoch, int64_t first_batch) {
  staged_.reset();  // the old epoch's (or old position's) next batch: the new one starts its own
  epoch_ended_ = false;
  failed_ = nullptr;
  loader_.start_epoch(epoch, first_batch);
}

std::optional<data::TwoViewBatch> DeviceBatches::next() {
  if (!normalize_) return loader_.next();
  if (failed_) std::rethrow_exception(failed_);  // this batch's, met while staging it
  if (!staged_) staged_ = fetch();               // the first batch since start_epoch
  if (!staged_) return std::nullopt;
  std::unique_ptr<Staged> current = std::move(staged_);
  staged_ = fetch_ahead();  // batch n+1's copy is queued before batch n is used, so it overlaps step n
  return hand_out(std::move(*current));
}

// The loader's error for batch n+1 belongs to the call that asks for it, as without the lookahead:
// batch n is still handed out, and the error named with the step of batch n+1.
std::unique_ptr<DeviceBatches::Staged> DeviceBatches::fetch_ahead() {
  try {
    return fetch();
  } catch (...) {
    failed_ = std::current_exception();
    return nullptr;
  }
}

std::unique_ptr<DeviceBatches::Staged> DeviceBatches::fetch() {
  if (epoch_ended_) return nullptr;
  auto host = loader_.next();
  if (!host) {
    epoch_ended_ = true;
    return nullptr;
  }
  return stage(std::move(*host));
}

std::unique_ptr<DeviceBatches::Staged> DeviceBatches::stage(data::TwoViewBatch host) {
  auto staged = std::make_unique<Staged>();
  staged->batch = std::move(host);
#if MOCO_WITH_CUDA
  if (lane_) {
    // Allocated and copied on the side stream: the compute stream goes on with the step meanwhile.
    const c10::cuda::CUDAStreamGuard on_lane(lane_->stream);
    views_to(staged->batch, device_, /*non_blocking=*/staged->batch.query.is_pinned());
    staged->copied.emplace();
    staged->copied->record(lane_->stream);
    return staged;
  }
#endif
  views_to(staged->batch, device_, /*non_blocking=*/false);
  return staged;
}

data::TwoViewBatch DeviceBatches::hand_out(Staged staged) const {
#if MOCO_WITH_CUDA
  if (staged.copied) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    staged.copied->block(compute);  // the step's stream waits for the copy, the host does not
    // The views were allocated on the side stream and are read on the compute stream: without this
    // the allocator could hand their memory to the next copy while the normalisation still reads it.
    for (const torch::Tensor* views : {&staged.batch.query, &staged.batch.key})
      if (views->defined()) c10::cuda::CUDACachingAllocator::recordStream(views->storage().data_ptr(), compute);
  }
#endif
  data::TwoViewBatch batch = std::move(staged.batch);
  batch.query = (*normalize_)(batch.query);
  if (batch.key.defined()) batch.key = (*normalize_)(batch.key);
  return batch;
}

std::string DeviceBatches::describe() const {
  if (!normalize_)
    return fmt::format("normalised floats on the host{}", device_.is_cuda() ? ", copied by the step" : "");
  if (lane_) return fmt::format("uint8, copied on a side stream one batch ahead, normalised on {}", device_.str());
  return fmt::format("uint8, one batch staged ahead, normalised on {}", device_.str());
}

}  // namespace moco::run
