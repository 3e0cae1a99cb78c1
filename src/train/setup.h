// defines: Splits and load_splits (the configured dataset's train and test splits), augment_options
// (data.* as augmentation and normalisation settings), backbone_options (the encoder model.* describes)
#pragma once

#include "data/augment.h"
#include "data/dataset.h"
#include "model/resnet.h"
#include "train/config.h"

#include <memory>

namespace moco::train {

struct Splits {
  std::shared_ptr<data::Dataset> train, test;
};

// Synthetic splits from the seed, or the IDX files under data.root (errors name the file).
Splits load_splits(const Config& config);

// MoCo's augmentation and the normalisation of every view (data.*).
data::AugmentOptions augment_options(const Config& config);

// The encoder of model.* for images of in_channels: arch, stem, width, head (one BatchNorm group).
model::ResNetOptions backbone_options(const Config& config, int64_t in_channels);

}  // namespace moco::train
