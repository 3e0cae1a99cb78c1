#include "train/setup.h"

#include "data/idx.h"
#include "data/synthetic.h"

namespace moco::train {
Splits load_splits(const Config& c) {
  if (c.data.dataset == "synthetic") {
    const int64_t side = c.data.image_size;
    // One task: the test split holds the samples after the train split's, of the same classes.
    return {std::make_shared<data::SyntheticDataset>(c.data.synthetic_train_size, c.data.synthetic_channels, side, side, 10, c.train.seed),
            std::make_shared<data::SyntheticDataset>(c.data.synthetic_test_size, c.data.synthetic_channels, side, side, 10, c.train.seed,
                                                     c.data.synthetic_train_size)};
  }
  auto idx = data::load_mnist_style_splits(c.data.root);
  return {std::move(idx.train), std::move(idx.test)};
}

data::AugmentOptions augment_options(const Config& c) {
  data::AugmentOptions a;
  a.recipe = data::parse_recipe(c.data.augmentation);  // validated with the config
  a.out_size = c.data.image_size;
  a.scale_min = c.data.crop_scale_min;
  a.flip_prob = c.data.flip_prob;
  a.jitter_prob = c.data.jitter_prob;
  a.brightness = c.data.brightness;
  a.contrast = c.data.contrast;
  a.saturation = c.data.saturation;
  a.hue = c.data.hue;
  a.grayscale_prob = c.data.grayscale_prob;
  a.blur_prob = c.data.blur_prob;
  a.blur_sigma_min = c.data.blur_sigma[0];
  a.blur_sigma_max = c.data.blur_sigma[1];
  a.mean = c.data.mean;
  a.std = c.data.std;
  return a;
}

model::ResNetOptions backbone_options(const Config& c, int64_t in_channels) {
  auto e = model::resnet_options_for(c.model.arch);
  e.in_channels = in_channels;
  e.small_stem = c.model.small_stem;
  e.small_stem_stride = c.model.stem_stride;
  if (c.model.width > 0) e.width = c.model.width;
  e.out_dim = c.model.dim;
  e.mlp_head = c.model.mlp;
  return e;
}

}  // namespace moco::train
