// defines: LinearProbe (the linear protocol's classifier behind the loop's method seam, run/method.h: a
// step is one SGD step of the fc on the frozen backbone's features), CachedFeatureBatches and
// ViewBatches (its batches: the un-augmented images' features extracted once, or a new augmented view
// of each image every epoch)
#pragma once

#include "data/loader.h"
#include "lincls/frozen_backbone.h"
#include "lincls/linear_classifier.h"
#include "run/batch_source.h"
#include "run/method.h"

#include <optional>
#include <vector>

namespace moco::lincls {

// A step's batch holds the backbone's input (ViewBatches) or its features already (CachedFeatureBatches).
class LinearProbe final : public run::Method {
 public:
  LinearProbe(LinearClassifier& classifier, const Backbone& backbone, bool cached_features)
      : classifier_(classifier), backbone_(backbone), cached_features_(cached_features) {}

  void set_lr(double lr) override { lr_ = lr; }
  run::StepOutput step(const data::TwoViewBatch& batch, int64_t step) override;
  std::vector<ckpt::StateEntry> state_entries() override { return classifier_.state_entries(); }
  model::Backbone encoder() override { return backbone_.net(); }

 private:
  LinearClassifier& classifier_;
  const Backbone& backbone_;
  bool cached_features_;
  double lr_ = 0;
};

// The features [N, d] and labels of the whole train split, handed out in the loader's order of each
// epoch (data::epoch_order: shuffled by seed and epoch, split over the ranks, the last batch partial).
class CachedFeatureBatches final : public run::BatchSource {
 public:
  CachedFeatureBatches(torch::Tensor features, torch::Tensor labels, data::LoaderOptions options)
      : features_(std::move(features)), labels_(std::move(labels)), options_(std::move(options)) {}
  void start_epoch(int64_t epoch, int64_t first_batch) override;
  std::optional<data::TwoViewBatch> next() override;

 private:
  torch::Tensor features_, labels_;
  data::LoaderOptions options_;
  std::vector<int64_t> order_;  // this rank's samples of the epoch
  int64_t next_batch_ = 0;
};

// A data::TwoViewLoader's batches of one view (the linear protocol's training view).
class ViewBatches final : public run::BatchSource {
 public:
  explicit ViewBatches(data::TwoViewLoader& loader) : loader_(loader) {}
  void start_epoch(int64_t epoch, int64_t first_batch) override { loader_.start_epoch(epoch, first_batch); }
  std::optional<data::TwoViewBatch> next() override { return loader_.next(); }

 private:
  data::TwoViewLoader& loader_;
};

}  // namespace moco::lincls
