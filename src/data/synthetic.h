// defines: SyntheticDataset, deterministic images for tests and benchmarks
#pragma once

#include "data/dataset.h"

namespace moco::data {

// Image i is a pure function of (seed, first + i): a class-dependent pattern (from the seed) plus
// noise, so the same index gives the same bytes in any process, thread or order. Two splits of one
// task share the seed and differ in `first` (the test split starts after the train split): the
// same classes, other samples.
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(int64_t size, int64_t channels, int64_t height, int64_t width, int64_t num_classes, uint64_t seed,
                   int64_t first = 0);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  int64_t channels() const override { return channels_; }
  int64_t height() const override { return height_; }
  int64_t width() const override { return width_; }
  int64_t num_classes() const override { return num_classes_; }

 private:
  int64_t size_, channels_, height_, width_, num_classes_;
  uint64_t seed_;
  int64_t first_;
};

}  // namespace moco::data
