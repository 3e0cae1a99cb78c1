#include "lincls/linear_probe.h"

#include <torch/torch.h>

#include <algorithm>

namespace moco::lincls {

run::StepOutput LinearProbe::step(const data::TwoViewBatch& batch, int64_t /*step*/) {
  const auto features = cached_features_ ? batch.query : backbone_.features(batch.query);
  run::StepOutput out;
  out.loss = classifier_.step(features, batch.labels, lr_);
  return out;
}

void CachedFeatureBatches::start_epoch(int64_t epoch, int64_t first_batch) {
  order_ = data::epoch_order(features_.size(0), options_, epoch);
  next_batch_ = first_batch;
}

std::optional<data::TwoViewBatch> CachedFeatureBatches::next() {
  const int64_t per_rank = options_.batch_size;
  const int64_t begin = next_batch_ * per_rank;
  if (begin >= static_cast<int64_t>(order_.size())) return std::nullopt;
  const int64_t end = std::min<int64_t>(begin + per_rank, static_cast<int64_t>(order_.size()));
  const auto indices = torch::tensor(std::vector<int64_t>(order_.begin() + begin, order_.begin() + end), torch::kLong);
  ++next_batch_;
  data::TwoViewBatch batch;
  batch.query = features_.index_select(0, indices);
  batch.labels = labels_.index_select(0, indices);
  batch.indices = indices;
  return batch;
}

}  // namespace moco::lincls
