// The augmentation's table (data/augment_params.h): every row states its evaluation rule, the ranges
// give the config's messages, augment_batch checks them, and evaluation_options follows the
// evaluation column (the linear protocol's training view: lincls/views.cpp).
#include "data/augment.h"
#include "data/augment_params.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace {

using namespace moco::data;

const AugmentParam& row(const std::string& key) {
  for (const auto& param : augment_params())
    if (param.key == key) return param;
  throw std::out_of_range("no row " + key);
}

TEST(AugmentParamsTest, EveryRowIsADataKeyWithHelpAndAnEvaluationRule) {
  std::set<std::string> keys;
  for (const auto& param : augment_params()) {
    const std::string key = param.key;
    EXPECT_TRUE(keys.insert(key).second) << key << " twice";
    EXPECT_EQ(key.rfind("data.", 0), 0u) << key;
    EXPECT_FALSE(std::string(param.help).empty()) << key;
    EXPECT_NE(param.eval, EvalRule::kUnstated) << key;  // augment_params.cpp refuses it at compile time too
  }
  EXPECT_EQ(keys.size(), 19u);
}

TEST(AugmentParamsTest, RangesGiveTheConfigsMessages) {
  AugmentOptions o;
  EXPECT_EQ(range_error(row("data.hue"), o), "");
  o.hue = 0.5;  // the edges inside
  o.brightness = 0.0;
  o.scale_min = 1.0;
  o.flip_prob = 1.0;
  for (const auto& param : augment_params()) EXPECT_EQ(range_error(param, o), "") << param.key;
  o.hue = 0.6;
  EXPECT_EQ(range_error(row("data.hue"), o), "must lie in [0, 0.5]");
  o.brightness = 1.0;
  EXPECT_EQ(range_error(row("data.brightness"), o), "must lie in [0, 1)");
  o.scale_min = 0.0;
  EXPECT_EQ(range_error(row("data.crop_scale_min"), o), "must lie in (0, 1]");
  o.flip_prob = -0.1;
  EXPECT_EQ(range_error(row("data.flip_prob"), o), "must lie in [0, 1]");
  o.out_size = 0;
  EXPECT_EQ(range_error(row("data.image_size"), o), "must lie in [1, 65536]");
  o.blur_sigma = {2.0, 1.0};
  EXPECT_EQ(range_error(row("data.blur_sigma"), o), "must be [min, max] with 0 < min <= max");
  o.mean = {};  // checked against the dataset's channels by the config, not by its row
  EXPECT_EQ(range_error(row("data.mean"), o), "");
}

// augment_batch refuses what the config would, naming the key.
TEST(AugmentParamsTest, AugmentBatchChecksTheRowsRanges) {
  AugmentOptions o;
  o.out_size = 8;
  const auto images = torch::zeros({1, 1, 12, 12}, torch::kUInt8);
  const std::vector<uint64_t> seeds{1};
  EXPECT_NO_THROW(augment_batch(images, o, seeds));
  o.hue = 0.6;
  EXPECT_EQ(moco::test::error_of([&] { augment_batch(images, o, seeds); }),
            "augment_batch: data.hue must lie in [0, 0.5]");
  o.hue = 0.1;
  o.brightness = 1.5;
  EXPECT_EQ(moco::test::error_of([&] { augment_batch(images, o, seeds); }),
            "augment_batch: data.brightness must lie in [0, 1)");
}

// Every row's member as its rule says, whatever its type: kKept the pre-training's, kOff 0, kProtocol
// the protocol's; the members without a row (scale_max, ratio) the protocol's.
TEST(AugmentParamsTest, EvaluationOptionsFollowTheEvaluationColumn) {
  AugmentOptions pretraining;  // every member unlike the protocol's and the defaults
  pretraining.recipe = Recipe::kV3;
  pretraining.transforms = Transforms::kTensor;
  pretraining.dct_scaling = false;
  pretraining.out_size = 77;
  pretraining.scale_min = 0.3, pretraining.scale_max = 0.9, pretraining.ratio_min = 0.6, pretraining.ratio_max = 1.7;
  pretraining.flip_prob = 0.7, pretraining.jitter_prob = 0.9, pretraining.grayscale_prob = 0.3;
  pretraining.blur_prob = 0.6, pretraining.brightness = 0.31, pretraining.contrast = 0.32;
  pretraining.saturation = 0.33, pretraining.hue = 0.34, pretraining.blur_sigma = {0.2, 1.5};
  pretraining.key_blur_prob = 0.35, pretraining.solarize_prob = 0.36, pretraining.key_solarize_prob = 0.37;
  pretraining.mean = {0.4, 0.5, 0.6}, pretraining.std = {0.2, 0.3, 0.4};
  AugmentOptions protocol;
  protocol.recipe = Recipe::kV1;
  protocol.scale_min = 0.08;
  const AugmentOptions view = evaluation_options(pretraining, protocol);
  for (const auto& param : augment_params()) {
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(view.*member)>;
          const T& expected = param.eval == EvalRule::kKept ? pretraining.*member : protocol.*member;
          EXPECT_TRUE(view.*member == (param.eval == EvalRule::kOff ? T{} : expected)) << param.key;
        },
        param.member);
  }
  EXPECT_EQ(view.scale_max, protocol.scale_max);
  EXPECT_EQ(view.ratio_min, protocol.ratio_min);
  EXPECT_EQ(view.ratio_max, protocol.ratio_max);
  // The column as main_lincls.py's view needs it: no colour change and no blur, at the
  // pre-training's size, implementation and normalisation; the crop and flip the protocol's.
  for (double off : {view.jitter_prob, view.brightness, view.contrast, view.saturation, view.hue, view.grayscale_prob,
                     view.blur_prob, view.key_blur_prob, view.solarize_prob, view.key_solarize_prob})
    EXPECT_EQ(off, 0.0);
  EXPECT_EQ(view.out_size, 77);
  EXPECT_EQ(view.transforms, Transforms::kTensor);
  EXPECT_EQ(view.mean, pretraining.mean);
  EXPECT_EQ(view.recipe, Recipe::kV1);
  EXPECT_EQ(view.scale_min, 0.08);
  EXPECT_EQ(view.flip_prob, 0.5);
}

}  // namespace
