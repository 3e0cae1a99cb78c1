// defines: PixelNormalizer (uint8 views -> the network's normalised float input, on their device, equal
// to data::normalize_into bit for bit) and DeviceBatches (the loader's batches handed to the step on
// the device; with uint8 views the next batch's copy is started before this one is handed out)
#pragma once

#include "data/augment_options.h"
#include "data/loader.h"
#include "run/batch_source.h"

#include <torch/types.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moco::run {

// ToTensor + Normalize of uint8 views [b, C, S, S] on their device: (x / 255 - mean[c]) / std[c] in
// float32, the same three IEEE operations in the same order as data::normalize_into, so the result is
// its bit for bit. mean/std hold 1 value (every channel) or `channels`.
class PixelNormalizer {
 public:
  PixelNormalizer(const std::vector<double>& mean, const std::vector<double>& std, int64_t channels,
                  torch::Device device);
  torch::Tensor operator()(const torch::Tensor& pixels) const;

 private:
  torch::Tensor scale_, mean_, std_;  // float [1, C, 1, 1] on the device
};

// Between the loader and the step. Float views (the CPU, the simple recipe) pass through as the
// loader gives them. uint8 views (data::LoaderOptions::uint8_views) are staged one batch ahead: next()
// hands out batch n on the device, normalised there, having started the copy of batch n+1 first. On
// CUDA that copy is asynchronous from pinned memory on a side stream, so it overlaps step n; on the
// CPU the same lookahead runs without a copy (what the tests drive). The staged batch is dropped by
// start_epoch; the loader's position is the caller's to count, by the batches handed out. The loader's
// error for a batch is thrown by the call that asks for that batch, and by every later one until
// start_epoch, as the loader does.
class DeviceBatches final : public BatchSource {
 public:
  DeviceBatches(data::TwoViewLoader& loader, const data::AugmentOptions& augment, int64_t channels,
                torch::Device device);
  ~DeviceBatches() override;
  DeviceBatches(const DeviceBatches&) = delete;
  DeviceBatches& operator=(const DeviceBatches&) = delete;

  // data::TwoViewLoader::start_epoch, a batch staged from before dropped.
  void start_epoch(int64_t epoch, int64_t first_batch = 0) override;
  // The next batch of the epoch on the device (uint8 views normalised), or nullopt at its end.
  std::optional<data::TwoViewBatch> next() override;
  // Which path the views take, for the start's log line.
  std::string describe() const;

 private:
  struct Staged;                          // a batch whose uint8 views are on their way to the device
  struct CopyLane;                        // CUDA: the side stream the copies run on
  std::unique_ptr<Staged> fetch();        // the loader's next batch, staged; nullptr at the epoch's end
  std::unique_ptr<Staged> fetch_ahead();  // fetch(), its error kept in failed_ for the next call
  std::unique_ptr<Staged> stage(data::TwoViewBatch host);
  data::TwoViewBatch hand_out(Staged staged) const;

  data::TwoViewLoader& loader_;
  const torch::Device device_;
  std::optional<PixelNormalizer> normalize_;  // with uint8 views only
  std::unique_ptr<CopyLane> lane_;            // with uint8 views on CUDA only
  std::unique_ptr<Staged> staged_;            // batch n+1, or batch n before the epoch's first next()
  bool epoch_ended_ = false;                  // the loader said nullopt: nothing more to fetch
  std::exception_ptr failed_;                 // the staged batch's error, thrown from next() until start_epoch
};

}  // namespace moco::run
