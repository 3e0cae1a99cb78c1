// defines: BatchSource (the batches a run trains on, epoch by epoch, as the run loop asks for them)
#pragma once

#include "data/loader.h"

#include <cstdint>
#include <optional>

namespace moco::run {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The epoch's batches from `first_batch` on (a resumed run's position).
  virtual void start_epoch(int64_t epoch, int64_t first_batch) = 0;
  // The epoch's next batch, or nullopt at its end.
  virtual std::optional<data::TwoViewBatch> next() = 0;
};

}  // namespace moco::run
