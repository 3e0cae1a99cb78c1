#include "data/augment.h"
#include "data/synthetic.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <vector>

namespace {

using moco::data::augment_batch;
using moco::data::AugmentOptions;
using moco::data::normalize_batch;
using moco::data::SyntheticDataset;
using moco::data::view_seed;

torch::Tensor images(int64_t n, int64_t c = 3, int64_t h = 20, int64_t w = 24) {
  SyntheticDataset dataset(n, c, h, w, 5, /*seed=*/11);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < n; ++i) indices.push_back(i);
  return dataset.get_batch(indices).first;
}

std::vector<uint64_t> seeds(int64_t n, uint64_t base) {
  std::vector<uint64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(view_seed(base, 0, i, 0));
  return out;
}

AugmentOptions plain_options(int64_t out_size) {
  AugmentOptions o;
  o.out_size = out_size;
  o.scale_min = o.scale_max = 1.0;
  o.ratio_min = o.ratio_max = 1.0;
  o.flip_prob = 0.0;
  o.jitter_prob = 0.0;
  return o;
}

TEST(AugmentTest, ShapeAndDtype) {
  AugmentOptions o;
  o.out_size = 16;
  const torch::Tensor out = augment_batch(images(4), o, seeds(4, 1));
  EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 3, 16, 16}));
  EXPECT_FALSE(out.requires_grad());
}

TEST(AugmentTest, SameSeedsSameOutputDifferentSeedsDifferent) {
  AugmentOptions o;
  o.out_size = 16;
  const torch::Tensor x = images(6);
  const torch::Tensor a = augment_batch(x, o, seeds(6, 1));
  const torch::Tensor b = augment_batch(x, o, seeds(6, 1));
  const torch::Tensor c = augment_batch(x, o, seeds(6, 2));
  EXPECT_TRUE(torch::equal(a, b));
  for (int64_t i = 0; i < 6; ++i) EXPECT_FALSE(torch::allclose(a[i], c[i])) << "sample " << i;
}

TEST(AugmentTest, SampleViewIndependentOfBatch) {
  AugmentOptions o;
  o.out_size = 16;
  const torch::Tensor x = images(2);
  const std::vector<uint64_t> s = seeds(2, 9);
  const torch::Tensor pair = augment_batch(x, o, s);
  const torch::Tensor alone = augment_batch(x.slice(0, 1, 2), o, {s[1]});
  EXPECT_TRUE(torch::allclose(pair[1], alone[0], /*rtol=*/0, /*atol=*/1e-6));
}

// An oracle for where the crop lies, independent of the sampling code: the image's channels hold
// each pixel's own row and column, and a crop of the output's size (scale and ratio fixed, no flip,
// no jitter) copies pixels one to one, so every output pixel says where it came from. The crop must
// be a rectangle of the image at an offset drawn uniformly over every valid position (torchvision's
// RandomResizedCrop), not at a fixed corner or the centre.
TEST(AugmentTest, CropLiesAtAUniformlyDrawnPosition) {
  const int64_t side = 20, crop = 12;  // area 144/400 = 0.36 of the image
  auto coords = torch::zeros({1, 2, side, side}, torch::kUInt8);
  for (int64_t y = 0; y < side; ++y)
    for (int64_t x = 0; x < side; ++x) {
      coords[0][0][y][x] = y;
      coords[0][1][y][x] = x;
    }
  AugmentOptions o = plain_options(crop);
  o.scale_min = o.scale_max = 0.36;
  o.mean = {0.0};
  o.std = {1.0 / 255.0};                                   // back to pixel values
  const int64_t draws = 400, positions = side - crop + 1;  // 9 tops, 9 lefts
  const auto out =
      augment_batch(coords.expand({draws, 2, side, side}).contiguous(), o, seeds(draws, 21)).round().to(torch::kLong);
  std::vector<int64_t> top_count(positions, 0), left_count(positions, 0);
  double top_sum = 0, left_sum = 0;
  for (int64_t n = 0; n < draws; ++n) {
    const int64_t top = out[n][0][0][0].item<int64_t>(), left = out[n][1][0][0].item<int64_t>();
    ASSERT_TRUE(top >= 0 && top < positions && left >= 0 && left < positions)
        << "draw " << n << ": " << top << ", " << left;
    // A rectangle of the image: row i of the crop is image row top+i, column j is column left+j.
    const auto rows = torch::arange(top, top + crop, torch::kLong).view({crop, 1}).expand({crop, crop});
    const auto cols = torch::arange(left, left + crop, torch::kLong).view({1, crop}).expand({crop, crop});
    ASSERT_TRUE(torch::equal(out[n][0], rows)) << "draw " << n << " is not rows " << top << ".." << top + crop - 1;
    ASSERT_TRUE(torch::equal(out[n][1], cols)) << "draw " << n << " is not columns " << left << ".." << left + crop - 1;
    ++top_count[top];
    ++left_count[left];
    top_sum += static_cast<double>(top);
    left_sum += static_cast<double>(left);
  }
  // Uniform over 9 positions: every one is drawn (each ~44 of 400 times; missing one has odds ~1e-19),
  // and the mean offset is near the middle, 4.
  for (int64_t p = 0; p < positions; ++p) {
    EXPECT_GT(top_count[p], 15) << "top " << p;
    EXPECT_GT(left_count[p], 15) << "left " << p;
  }
  EXPECT_NEAR(top_sum / draws, 4.0, 0.5);
  EXPECT_NEAR(left_sum / draws, 4.0, 0.5);
}

TEST(AugmentTest, FullCropWithoutFlipOrJitterIsNormalize) {
  const torch::Tensor x = images(3, 3, 24, 24);
  const AugmentOptions o = plain_options(24);
  const torch::Tensor out = augment_batch(x, o, seeds(3, 4));
  const torch::Tensor expected = normalize_batch(x, o);
  EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
}

TEST(AugmentTest, FlipWithFullCropMirrorsImage) {
  const torch::Tensor x = images(3, 1, 12, 12);
  AugmentOptions o = plain_options(12);
  o.flip_prob = 1.0;
  const torch::Tensor out = augment_batch(x, o, seeds(3, 5));
  const torch::Tensor expected = normalize_batch(x.flip({3}), o);
  EXPECT_LT((out - expected).abs().max().item<double>(), 1e-5);
  EXPECT_GT((out - normalize_batch(x, o)).abs().max().item<double>(), 0.1);
}

TEST(AugmentTest, ValuesBeforeNormalisationStayInUnitRange) {
  AugmentOptions o;
  o.out_size = 20;
  o.mean = {0.0};
  o.std = {1.0};
  o.jitter_prob = 1.0;
  o.brightness = o.contrast = 0.9;  // large factors push values past 1 before the clamp
  const torch::Tensor out = augment_batch(images(16), o, seeds(16, 3));
  EXPECT_GE(out.min().item<double>(), 0.0);
  EXPECT_LE(out.max().item<double>(), 1.0);
  EXPECT_EQ(out.max().item<double>(), 1.0);  // the clamp was exercised
}

TEST(AugmentTest, PerChannelNormalisation) {
  const torch::Tensor x = images(2, 3, 8, 8);
  AugmentOptions o = plain_options(8);
  o.mean = {0.1, 0.2, 0.3};
  o.std = {0.5, 0.25, 2.0};
  const torch::Tensor out = normalize_batch(x, o);
  const torch::Tensor unit = x.to(torch::kFloat) / 255;
  for (int c = 0; c < 3; ++c) {
    const torch::Tensor want = (unit.select(1, c) - o.mean[c]) / o.std[c];
    EXPECT_TRUE(torch::allclose(out.select(1, c), want, 1e-5, 1e-6)) << "channel " << c;
  }
  o.mean = {0.1, 0.2};
  EXPECT_THROW(normalize_batch(x, o), std::invalid_argument);
}

TEST(AugmentTest, RejectsBadInputs) {
  AugmentOptions o;
  EXPECT_THROW(augment_batch(images(2), o, seeds(3, 1)), std::invalid_argument);
  EXPECT_THROW(augment_batch(images(2).to(torch::kFloat), o, seeds(2, 1)), std::invalid_argument);
  o.scale_min = 0.0;
  EXPECT_THROW(augment_batch(images(2), o, seeds(2, 1)), std::invalid_argument);
}

TEST(AugmentTest, ViewSeedMixesAllInputs) {
  const uint64_t base = view_seed(1, 2, 3, 0);
  EXPECT_EQ(base, view_seed(1, 2, 3, 0));
  EXPECT_NE(base, view_seed(0, 2, 3, 0));
  EXPECT_NE(base, view_seed(1, 3, 3, 0));
  EXPECT_NE(base, view_seed(1, 2, 4, 0));
  EXPECT_NE(base, view_seed(1, 2, 3, 1));
  EXPECT_NE(view_seed(0, 1, 2, 0), view_seed(0, 2, 1, 0));  // order matters
}

TEST(AugmentTest, SyntheticImagesArePureFunctionsOfIndex) {
  SyntheticDataset dataset(100, 3, 16, 16, 10, 5);
  EXPECT_TRUE(torch::equal(dataset.get(42).image, dataset.get(42).image));
  EXPECT_FALSE(torch::equal(dataset.get(42).image, dataset.get(52).image));  // same class, new noise
  EXPECT_EQ(dataset.get(42).label, dataset.get(52).label);
  SyntheticDataset other_seed(100, 3, 16, 16, 10, 6);
  EXPECT_FALSE(torch::equal(dataset.get(42).image, other_seed.get(42).image));
  const auto batch = dataset.get_batch({3, 42});
  EXPECT_TRUE(torch::equal(batch.first[1], dataset.get(42).image));
}

}  // namespace
