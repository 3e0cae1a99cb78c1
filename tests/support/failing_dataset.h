// defines: FailingDataset (a synthetic dataset of 40 images whose one sample cannot be read), for the
// tests of how a loader's error reaches the step
#pragma once

#include "data/dataset.h"
#include "data/synthetic.h"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace moco::test_data {

// get(bad) throws; the default get_batch stacks get(), so the failure surfaces mid-batch.
class FailingDataset : public data::Dataset {
 public:
  FailingDataset(int64_t bad, int64_t channels, int64_t side) : inner_(40, channels, side, side, 4, 1), bad_(bad) {}
  int64_t size() const override { return inner_.size(); }
  data::Example get(int64_t index) const override {
    if (index == bad_) throw std::runtime_error("cannot read sample " + std::to_string(index));
    return inner_.get(index);
  }
  int64_t channels() const override { return inner_.channels(); }
  int64_t height() const override { return inner_.height(); }
  int64_t width() const override { return inner_.width(); }
  int64_t num_classes() const override { return inner_.num_classes(); }

 private:
  data::SyntheticDataset inner_;
  int64_t bad_;
};

}  // namespace moco::test_data
