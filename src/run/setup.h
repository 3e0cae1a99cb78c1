// defines: Splits and load_splits (the configured dataset's train and test splits), split_listing, augment_options
// (data.* as augmentation and normalisation settings), backbone_options, vit_options and make_backbone (the
// encoder model.* describes)
#pragma once

#include "data/augment.h"
#include "data/dataset.h"
#include "data/fingerprint.h"
#include "model/backbone.h"
#include "model/resnet.h"
#include "model/vit.h"
#include "run/config.h"

#include <memory>

namespace moco::run {

struct Splits {
  std::shared_ptr<data::Dataset> train, test;
};

// Synthetic splits from the seed, the IDX files under data.root (errors name the file), the
// ImageFolder splits data.root/data.train_dir and data.val_dir (a missing root, no class folder or
// an empty class: ConfigError naming the key and folder), or their packed shards
// data.root/<data.train_dir>-*.h5 and <data.val_dir>-*.h5 (none, or shards that do not belong
// together: ConfigError naming the key and the shard).
Splits load_splits(const Config& config);

// What only the data on disk can tell, checked before any work (exit 2 as a ConfigError): for
// imagefolder, that both splits exist, hold class folders with images, and the same classes; for
// hdf5, that both splits' shards are complete, agree, and hold the same classes. write_file_list:
// whether this process may write the file-list cache (rank 0 only: the folders may be shared by hosts);
// file_list_in_output_dir: whether it may write it into train.output_dir when the data's folder is
// read-only (not in a dry run or --eval-only, which write nothing there).
void check_data(const Config& config, const std::string& where, bool write_file_list = true,
                bool file_list_in_output_dir = true);

// What the data layer lists of the train (else the val/test) split, for its fingerprint
// (data/fingerprint.h): an ImageFolder's file list (as check_data found it, or its cache), the
// shards' index, the IDX files (read and hashed here), the synthetic set's parameters.
data::SplitListing split_listing(const Config& config, bool train);

// MoCo's augmentation and the normalisation of every view (data.*): the config's own options.
data::AugmentOptions augment_options(const Config& config);

// The encoder of model.* for images of in_channels: arch, stem, width, a linear head model.dim wide
// (one BatchNorm group).
model::ResNetOptions backbone_options(const Config& config, int64_t in_channels);
// The ViT of model.arch for images of in_channels at data.image_size, its head model.dim wide.
model::ViTOptions vit_options(const Config& config, int64_t in_channels);
// The encoder model.arch names, initialised (draws from the global generator): a ResNet or a ViT.
model::Backbone make_backbone(const Config& config, int64_t in_channels);

}  // namespace moco::run
